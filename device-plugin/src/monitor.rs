//! Starting the GPU health monitor ([`crate::health`]) for every GPU and MIG device of the node
//! (not only the advertised ones: a config change may advertise others), and turning its
//! changes into the [`HealthState`] the servers follow.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use gpuhook_node::{Inventory, NodeError, Nvml, NvmlLocation};
use tokio::sync::watch;

use crate::health::{HealthConfig, HealthError, HealthMonitor, Retarget, WatchedGpu, WatchedMig};
use crate::run::{AdSource, Loaded};
use crate::served::{follow_health, HealthState};
use crate::service::PreferError;

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

/// An [`AdSource`] that hands the node's devices to the health monitor at every load that
/// changed them, so the monitor follows MIG re-partitions (a re-partition moves the MIG
/// capability directories the source watches, and the load that follows re-reads the node).
/// The monitor takes the new devices before the new advertisement is served (one event wait,
/// at most `HealthConfig::wait`).
pub struct Following {
    inner: Box<dyn AdSource>,
    retarget: Retarget,
    last: Vec<WatchedGpu>,
}

impl std::fmt::Debug for Following {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Following")
            .field("watched_gpus", &self.last.len())
            .finish_non_exhaustive()
    }
}

impl Following {
    /// `inner` for a monitor started on `watched` (what [`watched_gpus`] gave at its start).
    pub fn new(inner: Box<dyn AdSource>, retarget: Retarget, watched: Vec<WatchedGpu>) -> Self {
        Following {
            inner,
            retarget,
            last: watched,
        }
    }
}

impl AdSource for Following {
    fn watched(&self) -> Vec<PathBuf> {
        self.inner.watched()
    }

    fn load(&mut self) -> Result<Loaded, PreferError> {
        let loaded = self.inner.load()?;
        if let Some(inv) = &loaded.inventory {
            let now = watched_gpus(inv);
            if now != self.last {
                self.retarget.set(now.clone());
                self.last = now;
            }
        }
        Ok(loaded)
    }

    fn fingerprint(&self) -> Option<u64> {
        self.inner.fingerprint()
    }
}

#[cfg(test)]
#[path = "monitor_tests.rs"]
mod tests;
