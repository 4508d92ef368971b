//! The kubelet's DRA plugin API (v1 and v1beta1), plugin registration and the DRA resource-health
//! API, written by hand (no protoc here), as the device plugin's `api.rs` is.
//!
//! Source of every message, field name and field number: `k8s.io/kubelet`
//! `pkg/apis/dra/{v1,v1beta1}/api.proto`, `pkg/apis/pluginregistration/v1/api.proto` and
//! `pkg/apis/dra-health/v1alpha1/api.proto` (Kubernetes 1.36.2; dra-facts §1, §2). The v1 and
//! v1beta1 messages have the same shape except `Device.share_id = 5` (v1 only), so one set of
//! types serves both packages; the v1beta1 service clears `share_id` before answering.

use std::collections::HashMap;

/// Service name of the v1 DRA API in `PluginInfo.supported_versions`.
pub const DRA_V1: &str = "v1.DRAPlugin";
/// Service name of the v1beta1 DRA API (kubelets 1.32/1.33).
pub const DRA_V1BETA1: &str = "v1beta1.DRAPlugin";
/// Service name of the resource-health API.
pub const HEALTH_V1ALPHA1: &str = "v1alpha1.DRAResourceHealth";
/// `PluginInfo.type` of a DRA plugin.
pub const PLUGIN_TYPE: &str = "DRAPlugin";
/// Where the kubelet's plugin watcher looks for registration sockets.
pub const PLUGINS_REGISTRY: &str = "/var/lib/kubelet/plugins_registry";
/// Parent of the plugin's own data dir (`<this>/<driver>/dra.sock`).
pub const PLUGINS_DIR: &str = "/var/lib/kubelet/plugins";

#[derive(Clone, PartialEq, Eq, ::prost::Message)]
pub struct Claim {
    #[prost(string, tag = "1")]
    pub namespace: String,
    #[prost(string, tag = "2")]
    pub uid: String,
    #[prost(string, tag = "3")]
    pub name: String,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct NodePrepareResourcesRequest {
    #[prost(message, repeated, tag = "1")]
    pub claims: Vec<Claim>,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct NodePrepareResourcesResponse {
    /// Keyed by claim UID.
    #[prost(map = "string, message", tag = "1")]
    pub claims: HashMap<String, NodePrepareResourceResponse>,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct NodePrepareResourceResponse {
    #[prost(message, repeated, tag = "1")]
    pub devices: Vec<Device>,
    #[prost(string, tag = "2")]
    pub error: String,
}

#[derive(Clone, PartialEq, Eq, ::prost::Message)]
pub struct Device {
    #[prost(string, repeated, tag = "1")]
    pub request_names: Vec<String>,
    #[prost(string, tag = "2")]
    pub pool_name: String,
    #[prost(string, tag = "3")]
    pub device_name: String,
    #[prost(string, repeated, tag = "4")]
    pub cdi_device_ids: Vec<String>,
    /// v1 only.
    #[prost(string, optional, tag = "5")]
    pub share_id: Option<String>,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct NodeUnprepareResourcesRequest {
    #[prost(message, repeated, tag = "1")]
    pub claims: Vec<Claim>,
}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct NodeUnprepareResourcesResponse {
    #[prost(map = "string, message", tag = "1")]
    pub claims: HashMap<String, NodeUnprepareResourceResponse>,
}

#[derive(Clone, PartialEq, Eq, ::prost::Message)]
pub struct NodeUnprepareResourceResponse {
    #[prost(string, tag = "1")]
    pub error: String,
}

/// `InfoRequest` (empty).
#[derive(Clone, Copy, PartialEq, Eq, ::prost::Message)]
pub struct InfoRequest {}

#[derive(Clone, PartialEq, Eq, ::prost::Message)]
pub struct PluginInfo {
    #[prost(string, tag = "1")]
    pub r#type: String,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(string, tag = "3")]
    pub endpoint: String,
    #[prost(string, repeated, tag = "4")]
    pub supported_versions: Vec<String>,
}

#[derive(Clone, PartialEq, Eq, ::prost::Message)]
pub struct RegistrationStatus {
    #[prost(bool, tag = "1")]
    pub plugin_registered: bool,
    #[prost(string, tag = "2")]
    pub error: String,
}

#[derive(Clone, Copy, PartialEq, Eq, ::prost::Message)]
pub struct RegistrationStatusResponse {}

#[derive(Clone, Copy, PartialEq, Eq, ::prost::Message)]
pub struct NodeWatchResourcesRequest {}

#[derive(Clone, PartialEq, ::prost::Message)]
pub struct NodeWatchResourcesResponse {
    #[prost(message, repeated, tag = "1")]
    pub devices: Vec<DeviceHealth>,
}

#[derive(Clone, PartialEq, Eq, ::prost::Message)]
pub struct DeviceIdentifier {
    #[prost(string, tag = "1")]
    pub pool_name: String,
    #[prost(string, tag = "2")]
    pub device_name: String,
}

/// `HealthStatus`: UNKNOWN=0, HEALTHY=1, UNHEALTHY=2.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, ::prost::Enumeration)]
#[repr(i32)]
pub enum HealthStatus {
    Unknown = 0,
    Healthy = 1,
    Unhealthy = 2,
}

#[derive(Clone, PartialEq, Eq, ::prost::Message)]
pub struct DeviceHealth {
    #[prost(message, optional, tag = "1")]
    pub device: Option<DeviceIdentifier>,
    #[prost(enumeration = "HealthStatus", tag = "2")]
    pub health: i32,
    /// Unix seconds.
    #[prost(int64, tag = "3")]
    pub last_updated_time: i64,
    #[prost(int64, tag = "4")]
    pub health_check_timeout_seconds: i64,
    #[prost(string, tag = "5")]
    pub message: String,
}

#[allow(missing_debug_implementations, clippy::all, clippy::pedantic)]
pub mod v1 {
    include!(concat!(
        env!("OUT_DIR"),
        "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin.rs"
    ));
    pub use d_r_a_plugin_client::DRAPluginClient;
    pub use d_r_a_plugin_server::{DRAPlugin, DRAPluginServer};
}

#[allow(missing_debug_implementations, clippy::all, clippy::pedantic)]
pub mod v1beta1 {
    include!(concat!(
        env!("OUT_DIR"),
        "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin.rs"
    ));
    pub use d_r_a_plugin_client::DRAPluginClient;
    pub use d_r_a_plugin_server::{DRAPlugin, DRAPluginServer};
}

#[allow(missing_debug_implementations, clippy::all, clippy::pedantic)]
pub mod registration {
    include!(concat!(
        env!("OUT_DIR"),
        "/pluginregistration.Registration.rs"
    ));
    pub use registration_client::RegistrationClient;
    pub use registration_server::{Registration, RegistrationServer};
}

#[allow(missing_debug_implementations, clippy::all, clippy::pedantic)]
pub mod health {
    include!(concat!(env!("OUT_DIR"), "/v1alpha1.DRAResourceHealth.rs"));
    pub use d_r_a_resource_health_client::DRAResourceHealthClient;
    pub use d_r_a_resource_health_server::{DRAResourceHealth, DRAResourceHealthServer};
}
