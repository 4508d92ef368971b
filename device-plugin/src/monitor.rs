//! Starting the GPU health monitor ([`crate::health`]) for every GPU and MIG device of the node
//! (not only the advertised ones: a config change may advertise others), and turning its
//! changes into the [`HealthState`] the servers follow.

use std::path::Path;
use std::sync::Arc;

use gpuhook_node::{Inventory, NodeError, Nvml, NvmlLocation};
use tokio::sync::watch;

use crate::health::{HealthConfig, HealthError, HealthMonitor, WatchedGpu, WatchedMig};
use crate::served::{follow_health, HealthState};

/// Changes buffered between the monitor thread and the servers.
const CHANGES: usize = 256;

/// Every GPU of `inv`, with its MIG devices.
pub fn watched_gpus(inv: &Inventory) -> Vec<WatchedGpu> {
    inv.gpus
        .iter()
        .map(|g| WatchedGpu {
            uuid: g.uuid.clone(),
            migs: g
                .mig_devices
                .iter()
                .map(|m| WatchedMig {
                    uuid: m.uuid.clone(),
                    gi: m.gi_id,
                    ci: m.ci_id,
                })
                .collect(),
        })
        .collect()
}

/// Loads NVML: the driver root's, or `nvml_lib`.
pub fn load_nvml(driver_root: &Path, nvml_lib: Option<&Path>) -> Result<Arc<Nvml>, NodeError> {
    let loc = NvmlLocation::locate(driver_root, nvml_lib)?;
    Ok(Arc::new(Nvml::load(&loc)?))
}

/// Starts the monitor. Must be called inside a tokio runtime.
pub fn start(
    nvml: Arc<Nvml>,
    inv: &Inventory,
) -> Result<(HealthMonitor, watch::Receiver<HealthState>), HealthError> {
    let (tx, rx) = tokio::sync::mpsc::channel(CHANGES);
    let monitor = HealthMonitor::start(nvml, watched_gpus(inv), HealthConfig::default(), tx)?;
    Ok((monitor, follow_health(rx)))
}
