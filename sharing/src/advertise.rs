//! What a node advertises to the kubelet under one config: the contract between the config
//! reader (this crate) and the device plugin's gRPC server (`gpuhook-device-plugin`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Everything the plugin advertises on this node, and the node labels that describe it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Advertisement {
    /// The named config this came from (`nvidia.com/device-plugin.config` label value, or the
    /// default's name).
    pub config_name: String,
    /// One entry per extended resource, sorted by name.
    pub resources: Vec<Resource>,
    /// GFD-style node labels (`nvidia.com/gpu.product`, `nvidia.com/gpu.count`, …).
    pub labels: BTreeMap<String, String>,
    /// How Allocate answers: the config's `deviceListStrategy`, in the config's order.
    pub device_list_strategies: Vec<DeviceListStrategy>,
    /// The config's `deviceIDStrategy`: what names a device in env vars and CDI names.
    pub device_id_strategy: DeviceIdStrategy,
    /// `flags.plugin.passDeviceSpecs`.
    pub pass_device_specs: bool,
    /// `flags.plugin.cdiAnnotationPrefix` (default `cdi.k8s.io/`).
    pub cdi_annotation_prefix: String,
    /// Host directory of the MPS daemon's per-resource pipe dirs and shm (`mpsRoot`).
    pub mps_root: Option<String>,
}

/// One extended resource (`nvidia.com/gpu`, `nvidia.com/mig-1g.10gb`, `nvidia.com/gpu.shared`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Resource {
    pub name: String,
    pub sharing: SharingKind,
    /// Replicas per physical device (1 when not shared).
    pub replicas: u32,
    /// Allocate refuses a request for more than one replica (`failRequestsGreaterThanOne`).
    pub fail_requests_greater_than_one: bool,
    /// Devices in advertisement order: GPU/MIG index order, replicas `::0..n` together.
    pub devices: Vec<AdvertisedDevice>,
}

/// How a resource's devices are shared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SharingKind {
    None,
    TimeSlicing,
    Mps,
}

/// One device ID the kubelet sees.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AdvertisedDevice {
    /// The ID in ListAndWatch: the `GPU-…`/`MIG-…` UUID, with `::<n>` for replica `n`. NVIDIA
    /// keeps UUIDs here under either `deviceIDStrategy`; that strategy names the device in
    /// Allocate's answer ([`Backing::device_name`]).
    pub id: String,
    /// What the ID stands for on the node.
    pub backing: Backing,
    /// Replica number, when the resource is replicated.
    pub replica: Option<u32>,
    /// NUMA node of the physical GPU, when known (TopologyInfo for the Topology Manager).
    pub numa_node: Option<u32>,
}

/// The physical device behind an advertised ID.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Backing {
    /// UUID of the physical GPU (the parent, for a MIG device).
    pub gpu_uuid: String,
    /// NVML index of the physical GPU.
    pub gpu_index: u32,
    /// Set when the device is a MIG device.
    pub mig: Option<MigBacking>,
    /// The name of this device in env vars and CDI (`deviceIDStrategy`): its UUID, or its index
    /// (`"<i>"` or `"<i>:<j>"`).
    pub device_name: String,
}

/// A MIG device behind an advertised ID.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MigBacking {
    pub uuid: String,
    pub gi: u32,
    pub ci: u32,
    /// `1g.10gb`, as NVML names the profile.
    pub profile: String,
}

/// `flags.deviceListStrategy` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DeviceListStrategy {
    Envvar,
    VolumeMounts,
    CdiAnnotations,
    CdiCri,
}

/// `flags.deviceIDStrategy` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DeviceIdStrategy {
    Uuid,
    Index,
}

/// Why a node cannot advertise under a config (the plugin refuses to start, as NVIDIA's does).
#[derive(Debug, thiserror::Error)]
pub enum AdvertiseError {
    /// `migStrategy: single` on a node it does not fit (`internal/rm/rm.go`).
    #[error(
        "flags.migStrategy single: {0}; use migStrategy mixed, or one MIG layout on every GPU"
    )]
    MigSingle(String),
    #[error("MIG profile '{profile}' (device {uuid}) does not match any resource patterns: migStrategy mixed only advertises profiles with as many compute as GPU-instance slices; use another MIG layout")]
    MigProfile { profile: String, uuid: String },
    #[error("sharing using MPS is not supported for MIG devices ({uuid}); share MIG devices with timeSlicing, or use migStrategy none")]
    MpsOnMig { uuid: String },
    #[error("invalid MPS configuration: invalid device maximum allowed replicas exceeded: {replicas} > {max} (GPU {uuid}); lower sharing.mps replicas to at most {max}")]
    MpsReplicas {
        uuid: String,
        replicas: u32,
        max: u32,
    },
    #[error("{resource}: replicas {replicas} is out of range")]
    Replicas { resource: String, replicas: i64 },
}
