//! A minimal CRI client: `RuntimeService/ListContainers` over the runtime's unix socket, to name
//! the Kubernetes pod, namespace and container of a container id (for `--cri-socket`).
//!
//! Only the messages and fields we read are written here (prost skips unknown fields). Field
//! numbers, the package `runtime.v1` and the method are those of `k8s.io/cri-api`
//! `pkg/apis/runtime/v1/api.proto` (`service RuntimeService`, `message ListContainersRequest`,
//! `ContainerFilter`, `ContainerStateValue`, `Container`, `ContainerMetadata`). The label keys are
//! the kubelet's (`pkg/kubelet/types/labels.go`: `KubernetesPodNameLabel`, ...), which it sets on
//! every container it creates (`kuberuntime/labels.go`: `newContainerLabels`).
//!
//! Every call is bounded in time and size: a hung or hostile runtime socket costs one
//! [`CALL_TIMEOUT`], never a GPU supervisor (the caller runs on its own task).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tonic::codec::ProstCodec;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::{Channel, Endpoint};

/// The gRPC path of `ListContainers`.
pub const LIST_CONTAINERS: &str = "/runtime.v1.RuntimeService/ListContainers";
/// Bound of a connection plus one call.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest response accepted (a node's container list is far smaller).
pub const MAX_RESPONSE_BYTES: usize = 16 << 20;
/// `ContainerState.CONTAINER_RUNNING`.
const CONTAINER_RUNNING: i32 = 1;

/// The kubelet's container labels (`pkg/kubelet/types/labels.go`).
pub const POD_NAME_LABEL: &str = "io.kubernetes.pod.name";
pub const POD_NAMESPACE_LABEL: &str = "io.kubernetes.pod.namespace";
pub const CONTAINER_NAME_LABEL: &str = "io.kubernetes.container.name";

/// `runtime.v1.ListContainersRequest` (field 1 only).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListContainersRequest {
    #[prost(message, optional, tag = "1")]
    pub filter: Option<ContainerFilter>,
}

/// `runtime.v1.ContainerFilter`: `id` = 1, `state` = 2 (`pod_sandbox_id` = 3 and `label_selector`
/// = 4 are not used).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerFilter {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(message, optional, tag = "2")]
    pub state: Option<ContainerStateValue>,
}

/// `runtime.v1.ContainerStateValue`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerStateValue {
    #[prost(int32, tag = "1")]
    pub state: i32,
}

/// `runtime.v1.ListContainersResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListContainersResponse {
    #[prost(message, repeated, tag = "1")]
    pub containers: Vec<Container>,
}

/// `runtime.v1.Container`: `id` = 1, `metadata` = 3, `labels` = 8 (the rest is skipped).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Container {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(message, optional, tag = "3")]
    pub metadata: Option<ContainerMetadata>,
    #[prost(map = "string, string", tag = "8")]
    pub labels: HashMap<String, String>,
}

/// `runtime.v1.ContainerMetadata`: `name` = 1.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerMetadata {
    #[prost(string, tag = "1")]
    pub name: String,
}

/// Where a container belongs in Kubernetes (DCGM exporter's `pod`, `namespace`, `container`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodRef {
    pub pod: String,
    pub namespace: String,
    pub container: String,
}

impl Container {
    /// The pod of a container the kubelet created (`None` for any other container).
    pub fn pod_ref(&self) -> Option<PodRef> {
        let get = |k: &str| self.labels.get(k).filter(|v| !v.is_empty()).cloned();
        Some(PodRef {
            pod: get(POD_NAME_LABEL)?,
            namespace: get(POD_NAMESPACE_LABEL)?,
            container: get(CONTAINER_NAME_LABEL)
                .or_else(|| self.metadata.as_ref().map(|m| m.name.clone()))?,
        })
    }
}

/// Why the runtime could not be asked.
#[derive(Debug, thiserror::Error)]
pub enum CriError {
    #[error("cannot connect to the CRI socket {}: {source} (check --cri-socket and that the daemon can reach it)", path.display())]
    Connect {
        path: PathBuf,
        source: tonic::transport::Error,
    },
    #[error("ListContainers on {} failed: {status}", path.display())]
    Call {
        path: PathBuf,
        status: Box<tonic::Status>,
    },
    #[error("no answer from the CRI socket {} within {secs} s", path.display())]
    Timeout { path: PathBuf, secs: u64 },
}

async fn connect(path: &Path) -> Result<Channel, CriError> {
    let p = path.to_path_buf();
    // The URI is required by tonic but unused: the connector dials the socket.
    Endpoint::from_static("http://localhost")
        .connect_timeout(CALL_TIMEOUT)
        .connect_with_connector(tower::service_fn(move |_| {
            let p = p.clone();
            async move { tokio::net::UnixStream::connect(p).await.map(TokioIo::new) }
        }))
        .await
        .map_err(|source| CriError::Connect {
            path: path.to_path_buf(),
            source,
        })
}

async fn call(path: &Path) -> Result<Vec<Container>, CriError> {
    let mut grpc = tonic::client::Grpc::new(connect(path).await?)
        .max_decoding_message_size(MAX_RESPONSE_BYTES);
    let failed = |status: tonic::Status| CriError::Call {
        path: path.to_path_buf(),
        status: Box::new(status),
    };
    grpc.ready()
        .await
        .map_err(|e| failed(tonic::Status::unavailable(e.to_string())))?;
    let req = ListContainersRequest {
        filter: Some(ContainerFilter {
            id: String::new(),
            state: Some(ContainerStateValue {
                state: CONTAINER_RUNNING,
            }),
        }),
    };
    let codec = ProstCodec::<ListContainersRequest, ListContainersResponse>::default();
    let path_q = PathAndQuery::from_static(LIST_CONTAINERS);
    let resp = grpc
        .unary(tonic::Request::new(req), path_q, codec)
        .await
        .map_err(failed)?;
    Ok(resp.into_inner().containers)
}

/// The running containers of the runtime at `path`, within [`CALL_TIMEOUT`] in all.
pub async fn list_running(path: &Path) -> Result<Vec<Container>, CriError> {
    match tokio::time::timeout(CALL_TIMEOUT, call(path)).await {
        Ok(r) => r,
        Err(_) => Err(CriError::Timeout {
            path: path.to_path_buf(),
            secs: CALL_TIMEOUT.as_secs(),
        }),
    }
}
