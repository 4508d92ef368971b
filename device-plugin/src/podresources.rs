//! A client of the kubelet's pod-resources API v1: which pod, namespace and container holds
//! each device ID the kubelet allocated (for `status` and the metrics' `pod`/`namespace`/
//! `container` labels, as dcgm-exporter reads them).
//!
//! Messages written by hand like `api.rs`. Source of every name and field number:
//! `k8s.io/kubelet` `pkg/apis/podresources/v1/api.proto` (read in kubernetes/kubernetes
//! `staging/src/k8s.io/kubelet/pkg/apis/podresources/v1/api.proto` at commit 95f0849, the
//! version with `Get` and `dynamic_resources`; package `v1`, so the route is
//! `/v1.PodResourcesLister/List`). Fields we don't read (`cpu_ids = 3`, `memory = 4`,
//! `dynamic_resources = 5` of `ContainerResources`) are left out: protobuf skips unknown fields.
//! The kubelet serves it on `/var/lib/kubelet/pod-resources/kubelet.sock`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::PluginError;

/// Where the kubelet serves the pod-resources API.
pub const POD_RESOURCES_SOCKET: &str = "/var/lib/kubelet/pod-resources/kubelet.sock";
/// Longest a List may take (the kubelet answers from memory).
const LIST_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest List response decoded (a node with hundreds of pods is well below).
const MAX_LIST_RESPONSE: usize = 16 << 20;

#[derive(Clone, Copy, PartialEq, ::prost::Message)]
pub struct ListPodResourcesRequest {}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ListPodResourcesResponse {
    #[prost(message, repeated, tag = "1")]
    pub pod_resources: Vec<PodResources>,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct PodResources {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub namespace: String,
    #[prost(message, repeated, tag = "3")]
    pub containers: Vec<ContainerResources>,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ContainerResources {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, repeated, tag = "2")]
    pub devices: Vec<ContainerDevices>,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ContainerDevices {
    #[prost(string, tag = "1")]
    pub resource_name: String,
    #[prost(string, repeated, tag = "2")]
    pub device_ids: Vec<String>,
    /// Same wire shape as the device plugin API's (`NUMANode ID = 1` in `nodes = 1`).
    #[prost(message, optional, tag = "3")]
    pub topology: Option<crate::api::TopologyInfo>,
}

#[allow(missing_debug_implementations, clippy::all, clippy::pedantic)]
mod generated {
    include!(concat!(env!("OUT_DIR"), "/v1.PodResourcesLister.rs"));
}

pub use generated::pod_resources_lister_client::PodResourcesListerClient;
pub use generated::pod_resources_lister_server::{PodResourcesLister, PodResourcesListerServer};

/// One device ID the kubelet assigned to a container.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub struct Assignment {
    pub resource: String,
    pub device_id: String,
    pub pod: String,
    pub namespace: String,
    pub container: String,
}

/// Why the kubelet's assignments could not be read.
#[derive(Debug, thiserror::Error)]
pub enum PodResourcesError {
    #[error(transparent)]
    Connect(#[from] PluginError),
    #[error("List on the kubelet's pod-resources socket {} failed", path.display())]
    List {
        path: PathBuf,
        #[source]
        source: tonic::Status,
    },
    #[error("no answer from the kubelet's pod-resources socket {} within {LIST_TIMEOUT:?}", path.display())]
    Timeout { path: PathBuf },
}

/// Flattens a List answer into one row per (container, device ID).
pub fn assignments(resp: &ListPodResourcesResponse) -> Vec<Assignment> {
    let mut out = Vec::new();
    for p in &resp.pod_resources {
        for c in &p.containers {
            for d in &c.devices {
                out.extend(d.device_ids.iter().map(|id| Assignment {
                    resource: d.resource_name.clone(),
                    device_id: id.clone(),
                    pod: p.name.clone(),
                    namespace: p.namespace.clone(),
                    container: c.name.clone(),
                }));
            }
        }
    }
    out.sort();
    out
}

/// Lists every device assignment the kubelet knows through the socket at `path`.
pub async fn list(path: &Path) -> Result<Vec<Assignment>, PodResourcesError> {
    let channel = crate::kubelet::connect(path).await?;
    let mut client =
        PodResourcesListerClient::new(channel).max_decoding_message_size(MAX_LIST_RESPONSE);
    let call = client.list(ListPodResourcesRequest {});
    let resp = tokio::time::timeout(LIST_TIMEOUT, call)
        .await
        .map_err(|_| PodResourcesError::Timeout {
            path: path.to_path_buf(),
        })?
        .map_err(|source| PodResourcesError::List {
            path: path.to_path_buf(),
            source,
        })?;
    Ok(assignments(&resp.into_inner()))
}
