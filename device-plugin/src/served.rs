//! What one resource's server answers from: the advertised resource, how Allocate answers
//! (the config's strategies and the plugin's own options) and each device's current health.
//!
//! A [`Served`] is immutable; a config change or a health change builds a new one and the
//! server publishes it on a `watch` channel, so ListAndWatch streams and Allocate always see one
//! consistent state.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;

use gpuhook_node::Inventory;
use gpuhook_sharing::{Advertisement, DeviceIdStrategy, DeviceListStrategy, Resource};

use crate::api;

/// Kind of gpuhook's GPU CDI spec (`gpuhook cdi generate`): devices `<index>`, `<i>:<j>`,
/// `GPU-…`, `MIG-…`, `all`.
pub const GPU_CDI_KIND: &str = "nvidia.com/gpu";
/// Kind of gpu-mps-daemon's CDI spec: devices `<index>`, `<uuid>` (and `-<share>` variants).
pub const MPS_CDI_KIND: &str = "nvidia.com/gpu-mps";
/// gpu-mps-daemon's default `mpsDaemon.containerPipeDirectory`.
pub const DEFAULT_CONTAINER_PIPE_DIR: &str = "/tmp/nvidia-mps";

/// The health input: which physical devices are unhealthy now. Keys are GPU UUIDs or MIG
/// device UUIDs; an unhealthy GPU makes its MIG devices and all their replicas unhealthy.
/// The health monitor publishes a whole snapshot on a `tokio::sync::watch` channel each time
/// it changes, so a late reader never misses a state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HealthState {
    pub unhealthy: BTreeSet<String>,
}

impl HealthState {
    /// Whether a device backed by GPU `gpu_uuid` (and MIG device `mig_uuid`) is unhealthy.
    pub fn is_unhealthy(&self, gpu_uuid: &str, mig_uuid: Option<&str>) -> bool {
        self.unhealthy.contains(gpu_uuid) || mig_uuid.is_some_and(|m| self.unhealthy.contains(m))
    }
}

/// How Allocate answers: the config's part (from the [`Advertisement`]) and the node's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocSettings {
    pub strategies: Vec<DeviceListStrategy>,
    pub id_strategy: DeviceIdStrategy,
    pub pass_device_specs: bool,
    pub cdi_annotation_prefix: String,
    pub mps_root: Option<PathBuf>,
    /// Where the MPS pipe directory appears in the container (gpu-mps-daemon's
    /// `containerPipeDirectory`).
    pub container_pipe_dir: String,
    /// Host root of `/dev/nvidia*` (`nvidiaDevRoot`) for DeviceSpecs' host paths.
    pub dev_root: PathBuf,
    /// Device nodes (container paths) of each GPU or MIG device UUID, for passDeviceSpecs.
    pub device_paths: BTreeMap<String, Vec<String>>,
    /// How GetPreferredAllocation spreads replicas and MIG devices.
    pub policy: crate::preferred::AllocationPolicy,
}

impl AllocSettings {
    /// The config's settings from `ad`; node facts from `inv` when there is one.
    pub fn new(ad: &Advertisement, inv: Option<&Inventory>, container_pipe_dir: &str) -> Self {
        AllocSettings {
            strategies: ad.device_list_strategies.clone(),
            id_strategy: ad.device_id_strategy,
            pass_device_specs: ad.pass_device_specs,
            cdi_annotation_prefix: ad.cdi_annotation_prefix.clone(),
            mps_root: ad.mps_root.as_ref().map(PathBuf::from),
            container_pipe_dir: container_pipe_dir.to_string(),
            dev_root: inv.map_or_else(|| PathBuf::from("/"), |i| i.dev_root.clone()),
            device_paths: inv.map(device_paths).unwrap_or_default(),
            policy: crate::preferred::AllocationPolicy::default(),
        }
    }
}

/// `/dev/nvidia<minor>` of each GPU; a MIG device adds its GI and CI capability nodes
/// (`/dev/nvidia-caps/nvidia-cap<minor>`), as NVIDIA's `nvmlMigDevice.GetPaths`.
pub fn device_paths(inv: &Inventory) -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    for g in &inv.gpus {
        let node = format!("/dev/nvidia{}", g.minor);
        for m in &g.mig_devices {
            let caps =
                [m.gi_cap_minor, m.ci_cap_minor].map(|c| format!("/dev/nvidia-caps/nvidia-cap{c}"));
            let mut paths = vec![node.clone()];
            paths.extend(caps);
            out.insert(m.uuid.clone(), paths);
        }
        out.insert(g.uuid.clone(), vec![node]);
    }
    out
}

/// One resource as served now.
#[derive(Debug, Clone)]
pub struct Served {
    pub resource: Resource,
    pub settings: AllocSettings,
    pub health: HealthState,
    /// Advertised ID → position in `resource.devices`.
    index: HashMap<String, usize>,
}

impl Served {
    pub fn new(resource: Resource, settings: AllocSettings, health: HealthState) -> Self {
        let index = resource
            .devices
            .iter()
            .enumerate()
            .map(|(i, d)| (d.id.clone(), i))
            .collect();
        Served {
            resource,
            settings,
            health,
            index,
        }
    }

    /// The advertised device with ID `id`.
    pub fn device(&self, id: &str) -> Option<&gpuhook_sharing::AdvertisedDevice> {
        self.index.get(id).map(|&i| &self.resource.devices[i])
    }

    fn healthy(&self, d: &gpuhook_sharing::AdvertisedDevice) -> bool {
        let mig = d.backing.mig.as_ref().map(|m| m.uuid.as_str());
        !self.health.is_unhealthy(&d.backing.gpu_uuid, mig)
    }

    /// The ListAndWatch list: every device with its health and NUMA node.
    pub fn device_list(&self) -> api::ListAndWatchResponse {
        let devices = self
            .resource
            .devices
            .iter()
            .map(|d| api::Device {
                id: d.id.clone(),
                health: if self.healthy(d) {
                    api::HEALTHY
                } else {
                    api::UNHEALTHY
                }
                .to_string(),
                topology: d.numa_node.map(|n| api::TopologyInfo {
                    nodes: vec![api::NumaNode { id: i64::from(n) }],
                }),
            })
            .collect();
        api::ListAndWatchResponse { devices }
    }
}

impl HealthState {
    /// Applies one change from the health monitor ([`crate::health::HealthChange`]).
    pub fn apply(&mut self, c: &crate::health::HealthChange) {
        let key = c.mig_uuid.clone().unwrap_or_else(|| c.gpu_uuid.clone());
        if c.healthy {
            self.unhealthy.remove(&key);
        } else {
            self.unhealthy.insert(key);
        }
    }
}

/// Folds the health monitor's changes into the snapshot the servers follow.
pub fn follow_health(
    mut rx: tokio::sync::mpsc::Receiver<crate::health::HealthChange>,
) -> tokio::sync::watch::Receiver<HealthState> {
    let (tx, out) = tokio::sync::watch::channel(HealthState::default());
    tokio::spawn(async move {
        while let Some(c) = rx.recv().await {
            tracing::debug!(gpu = %c.gpu_uuid, mig = ?c.mig_uuid, healthy = c.healthy, "health change applied");
            tx.send_modify(|h| h.apply(&c));
        }
    });
    out
}
