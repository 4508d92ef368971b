//! A fake CRI runtime for tests and the benchmark: serves `runtime.v1.RuntimeService/
//! ListContainers` on a unix socket, listing the containers of a file (one `<container id>
//! <namespace> <pod> <container>` per line) labelled the way the kubelet labels its containers
//! (`kuberuntime/labels.go`). Messages: the CRI subset of `gpu_mps_daemon::cri`.
//!
//! `fake_cri SOCKET CONTAINERS-FILE` (runs until killed).

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use gpu_mps_daemon::cri::{
    Container, ContainerMetadata, ListContainersRequest, ListContainersResponse,
    CONTAINER_NAME_LABEL, POD_NAMESPACE_LABEL, POD_NAME_LABEL,
};
use tonic::body::BoxBody;
use tonic::codegen::{http, BoxFuture, Service, StdError};

#[derive(Clone)]
struct Fake(Arc<Vec<Container>>);

impl tonic::server::NamedService for Fake {
    const NAME: &'static str = "runtime.v1.RuntimeService";
}

struct List(Fake);

impl tonic::server::UnaryService<ListContainersRequest> for List {
    type Response = ListContainersResponse;
    type Future = BoxFuture<tonic::Response<Self::Response>, tonic::Status>;
    fn call(&mut self, _: tonic::Request<ListContainersRequest>) -> Self::Future {
        let containers = self.0 .0.to_vec();
        Box::pin(async move { Ok(tonic::Response::new(ListContainersResponse { containers })) })
    }
}

impl<B> Service<http::Request<B>> for Fake
where
    B: tonic::codegen::Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<BoxBody>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;
    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }
    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let f = self.clone();
        Box::pin(async move {
            if req.uri().path() != gpu_mps_daemon::cri::LIST_CONTAINERS {
                return Ok(tonic::Status::unimplemented("fake: ListContainers only").into_http());
            }
            let codec =
                tonic::codec::ProstCodec::<ListContainersResponse, ListContainersRequest>::default(
                );
            Ok(tonic::server::Grpc::new(codec).unary(List(f), req).await)
        })
    }
}

fn container(line: &str) -> Option<Container> {
    let mut it = line.split_whitespace();
    let (id, ns, pod, name) = (it.next()?, it.next()?, it.next()?, it.next()?);
    let labels = HashMap::from([
        (POD_NAME_LABEL.to_string(), pod.to_string()),
        (POD_NAMESPACE_LABEL.to_string(), ns.to_string()),
        (CONTAINER_NAME_LABEL.to_string(), name.to_string()),
    ]);
    Some(Container {
        id: id.to_string(),
        metadata: Some(ContainerMetadata {
            name: name.to_string(),
        }),
        labels,
    })
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let argv: Vec<String> = std::env::args().collect();
    let [_, socket, file] = &argv[..] else {
        return Err("usage: fake_cri SOCKET CONTAINERS-FILE".into());
    };
    let list: Vec<Container> = std::fs::read_to_string(file)?
        .lines()
        .filter_map(container)
        .collect();
    let listener = tokio::net::UnixListener::bind(socket)?;
    let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
    tonic::transport::Server::builder()
        .add_service(Fake(Arc::new(list)))
        .serve_with_incoming(incoming)
        .await?;
    Ok(())
}
