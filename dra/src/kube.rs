//! The API-server calls the plugin makes, behind one small trait ([`Cluster`]) so the driver and
//! its tests do not depend on how the API server is reached. [`HttpCluster`] goes through
//! `gpuhook-kube`, the project's one Kubernetes client (in-cluster config, HTTPS only, no
//! redirects, bounded reads; plain HTTP only to a loopback test server).
//!
//! Paths (resource.k8s.io/v1, dra-facts §3):
//! - `GET /apis/resource.k8s.io/v1/namespaces/<ns>/resourceclaims/<name>`
//! - `GET /api/v1/namespaces/<ns>/pods/<name>` (the claim's pods, for the claim index)
//! - `GET /apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName=<node>,spec.driver=<driver>`
//! - `POST /apis/resource.k8s.io/v1/resourceslices`, `PUT …/resourceslices/<name>`,
//!   `DELETE …/resourceslices/<name>`

use gpuhook_kube::{check_name, Client, ListParams};
use serde_json::Value;

pub use gpuhook_kube::KubeError;

/// Root of the resource.k8s.io/v1 API.
pub const RESOURCE_V1: &str = "/apis/resource.k8s.io/v1";

/// What the plugin asks of the API server.
pub trait Cluster: Send + Sync + std::fmt::Debug {
    /// The ResourceClaim `namespace/name` as JSON.
    fn get_claim(&self, namespace: &str, name: &str) -> Result<Value, KubeError>;
    /// The Pod `namespace/name` as JSON (for the claim index, [`crate::podindex`]).
    fn get_pod(&self, namespace: &str, name: &str) -> Result<Value, KubeError>;
    /// This node's ResourceSlices of `driver`.
    fn list_slices(&self, node: &str, driver: &str) -> Result<Vec<Value>, KubeError>;
    fn create_slice(&self, slice: &Value) -> Result<(), KubeError>;
    fn replace_slice(&self, name: &str, slice: &Value) -> Result<(), KubeError>;
    fn delete_slice(&self, name: &str) -> Result<(), KubeError>;
}

/// The API server through `gpuhook-kube`.
#[derive(Debug, Clone)]
pub struct HttpCluster {
    client: Client,
}

impl HttpCluster {
    pub fn new(client: Client) -> Self {
        HttpCluster { client }
    }

    /// A test server on a loopback address (plain HTTP).
    pub fn plain(url: &str) -> Result<Self, KubeError> {
        Ok(HttpCluster::new(Client::loopback(url)?))
    }

    /// The API server as a pod sees it.
    pub fn in_cluster() -> Result<Self, KubeError> {
        Ok(HttpCluster::new(Client::in_cluster()?))
    }
}

impl Cluster for HttpCluster {
    fn get_claim(&self, namespace: &str, name: &str) -> Result<Value, KubeError> {
        check_name("namespace", namespace)?;
        check_name("ResourceClaim name", name)?;
        self.client.get(&format!(
            "{RESOURCE_V1}/namespaces/{namespace}/resourceclaims/{name}"
        ))
    }

    fn get_pod(&self, namespace: &str, name: &str) -> Result<Value, KubeError> {
        check_name("namespace", namespace)?;
        check_name("Pod name", name)?;
        self.client
            .get(&format!("/api/v1/namespaces/{namespace}/pods/{name}"))
    }

    fn list_slices(&self, node: &str, driver: &str) -> Result<Vec<Value>, KubeError> {
        let params = ListParams {
            field_selector: Some(format!("spec.nodeName={node},spec.driver={driver}")),
            ..Default::default()
        };
        let list = self
            .client
            .list(&format!("{RESOURCE_V1}/resourceslices"), &params)?;
        Ok(list
            .get("items")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default())
    }

    fn create_slice(&self, slice: &Value) -> Result<(), KubeError> {
        self.client
            .create(&format!("{RESOURCE_V1}/resourceslices"), slice)
            .map(drop)
    }

    fn replace_slice(&self, name: &str, slice: &Value) -> Result<(), KubeError> {
        check_name("ResourceSlice name", name)?;
        self.client
            .replace(&format!("{RESOURCE_V1}/resourceslices/{name}"), slice)
            .map(drop)
    }

    fn delete_slice(&self, name: &str) -> Result<(), KubeError> {
        check_name("ResourceSlice name", name)?;
        match self
            .client
            .delete(&format!("{RESOURCE_V1}/resourceslices/{name}"))
        {
            Err(e) if e.is_not_found() => Ok(()),
            r => r.map(drop),
        }
    }
}
