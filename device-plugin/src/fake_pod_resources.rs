//! A fake kubelet pod-resources server for tests (feature `testing`): the device plugin's usage
//! report, the MIG manager's holders and their end-to-end tests all need "the kubelet says these
//! containers hold these IDs", served over the real socket and protocol (`v1.PodResourcesLister`,
//! `List`), so the client code under test is the product's own.

use std::path::Path;

use tonic::{Request, Response, Status};

use crate::podresources::{
    ListPodResourcesRequest, ListPodResourcesResponse, PodResourcesLister, PodResourcesListerServer,
};

/// Answers every `List` with the same response.
#[derive(Debug)]
struct FixedLister(ListPodResourcesResponse);

#[tonic::async_trait]
impl PodResourcesLister for FixedLister {
    async fn list(
        &self,
        _: Request<ListPodResourcesRequest>,
    ) -> Result<Response<ListPodResourcesResponse>, Status> {
        Ok(Response::new(self.0.clone()))
    }
}

/// Serves `resp` as the kubelet's pod-resources API on `sock` (its parent directory is created),
/// on a thread and runtime of its own that live as long as the test process; returns once the
/// socket is bound.
///
/// # Panics
/// When the socket cannot be bound or the runtime not built: a test set-up failure.
#[allow(clippy::expect_used)] // test support: a failed set-up is the test's failure
pub fn serve_pod_resources(sock: &Path, resp: ListPodResourcesResponse) {
    if let Some(parent) = sock.parent() {
        std::fs::create_dir_all(parent).expect("create the pod-resources socket's directory");
    }
    let path = sock.to_path_buf();
    let (bound_tx, bound_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().expect("a runtime for the fake kubelet");
        rt.block_on(async move {
            let listener = tokio::net::UnixListener::bind(&path).expect("bind the fake kubelet");
            let _ = bound_tx.send(());
            let served = tonic::transport::Server::builder()
                .add_service(PodResourcesListerServer::new(FixedLister(resp)))
                .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener))
                .await;
            if let Err(e) = served {
                eprintln!("fake pod-resources server ended: {e}");
            }
        });
    });
    bound_rx
        .recv()
        .expect("the fake kubelet thread bound its socket");
}
