//! GPU health: NVML events turned into [`HealthChange`]s for ListAndWatch.
//!
//! Like NVIDIA's plugin (`internal/rm/health.go`), a dedicated thread creates an NVML event set,
//! registers every GPU for XidCriticalError and single/double-bit ECC events (limited to what the
//! GPU supports), and waits for events. Only critical Xids count, minus the ignored ones
//! ([`XidFilter`]: `DP_DISABLE_HEALTHCHECKS` / `DP_ENABLE_HEALTHCHECKS`). An Xid attributed to a
//! MIG instance (GI/CI) marks the matching MIG devices (NVIDIA's `matchesMigEvent`: an id of
//! `0xFFFFFFFF` matches any); one not attributed to an instance marks the GPU and all its MIG
//! devices. A failed wait, or an event NVML cannot name the device of, marks everything.
//!
//! Deliberate differences from NVIDIA v0.20:
//! - **Everything on the failed GPU is marked.** v0.20 keeps one device per parent UUID in
//!   `parentToDeviceMap`, so only the last replica / MIG device of a GPU went unhealthy. A change
//!   here names the GPU (and MIG device); the server marks every replica of it.
//! - **Devices come back.** v0.20 never sets a device healthy again (`ListAndWatch` FIXME).
//!   Recovery here: every `probe_interval` each GPU is probed (`nvmlDeviceGetHandleByUUID` +
//!   `nvmlDeviceGetMemoryInfo`). A GPU whose probe fails with `GPU_IS_LOST` (or that raised Xid
//!   79, "fallen off the bus") is lost; it recovers at the first successful probe. A device
//!   marked by a critical Xid recovers once it probes fine and `xid_hold` has passed without a
//!   new critical Xid on it (a GPU that needs a reset raises the Xid again on next use). A failed
//!   event wait marks everything until a wait succeeds again; a GPU that cannot be registered for
//!   events stays unhealthy (its health cannot be watched).
//! - **GPU lost is detected without an event**, by the same probe.
//! - **The watched devices can change** ([`Retarget`], `health/retarget.rs`): after a MIG
//!   re-partition the new MIG devices are watched and events are matched against them; devices
//!   that are gone are forgotten (a fault of theirs is cleared with a last change), faults of
//!   devices that remain are kept, and a new MIG device of a GPU that is down is down with it.

mod xids;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use gpuhook_node::nvml::events;
use gpuhook_node::{NodeError, Nvml};
use tokio::sync::mpsc::Sender;

pub use xids::{XidFilter, DEFAULT_IGNORED, ENV_DISABLE, ENV_ENABLE};

/// Xid 79: "GPU has fallen off the bus".
pub const XID_GPU_LOST: u64 = 79;

/// A device became unhealthy or healthy again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthChange {
    /// The physical GPU.
    pub gpu_uuid: String,
    /// The MIG device, when the change is about one MIG device of the GPU.
    pub mig_uuid: Option<String>,
    pub healthy: bool,
    /// Why, for logs and events (e.g. `critical Xid 48`).
    pub reason: String,
}

/// A MIG device to watch: its UUID and GPU/compute instance ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchedMig {
    pub uuid: String,
    pub gi: u32,
    pub ci: u32,
}

/// A physical GPU to watch, with the MIG devices of it that are advertised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchedGpu {
    pub uuid: String,
    pub migs: Vec<WatchedMig>,
}

/// The GPUs (and MIG devices) behind an advertisement, each once.
pub fn watched_from(ad: &gpuhook_sharing::Advertisement) -> Vec<WatchedGpu> {
    let mut gpus: BTreeMap<&str, WatchedGpu> = BTreeMap::new();
    for dev in ad.resources.iter().flat_map(|r| &r.devices) {
        let b = &dev.backing;
        let gpu = gpus.entry(&b.gpu_uuid).or_insert_with(|| WatchedGpu {
            uuid: b.gpu_uuid.clone(),
            migs: Vec::new(),
        });
        if let Some(m) = &b.mig {
            if !gpu.migs.iter().any(|w| w.uuid == m.uuid) {
                gpu.migs.push(WatchedMig {
                    uuid: m.uuid.clone(),
                    gi: m.gi,
                    ci: m.ci,
                });
            }
        }
    }
    gpus.into_values().collect()
}

/// Monitor settings.
#[derive(Debug, Clone)]
pub struct HealthConfig {
    pub xids: XidFilter,
    /// Longest single `nvmlEventSetWait_v2` (also bounds how long [`HealthMonitor::stop`] takes).
    pub wait: Duration,
    /// How often GPUs are probed for loss and recovery.
    pub probe_interval: Duration,
    /// How long a device marked by a critical Xid stays unhealthy at least.
    pub xid_hold: Duration,
}

impl Default for HealthConfig {
    fn default() -> Self {
        HealthConfig {
            xids: XidFilter::from_env(),
            wait: Duration::from_millis(500),
            probe_interval: Duration::from_secs(1),
            xid_hold: Duration::from_secs(300),
        }
    }
}

/// Why the monitor could not start.
#[derive(Debug, thiserror::Error)]
pub enum HealthError {
    #[error("cannot watch GPU health through NVML events")]
    Nvml(#[source] NodeError),
    #[error("cannot start the GPU health monitor thread")]
    Thread(#[source] std::io::Error),
    #[error("the GPU health monitor thread ended before it was set up")]
    SetupLost,
}

/// The running monitor; stops (and joins its thread) on [`HealthMonitor::stop`] or drop.
#[derive(Debug)]
pub struct HealthMonitor {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    retarget: Retarget,
}

impl HealthMonitor {
    /// Registers the GPUs for events and starts watching; returns once registration is done
    /// (GPUs that cannot be registered are reported unhealthy on `tx` right away).
    pub fn start(
        nvml: Arc<Nvml>,
        gpus: Vec<WatchedGpu>,
        config: HealthConfig,
        tx: Sender<HealthChange>,
    ) -> Result<HealthMonitor, HealthError> {
        let stop = Arc::new(AtomicBool::new(false));
        let (retarget, targets) = retarget::channel();
        if config.xids.all_disabled() {
            tracing::info!(env = ENV_DISABLE, "health checks disabled");
            return Ok(HealthMonitor {
                stop,
                thread: None,
                retarget,
            });
        }
        tracing::info!(ignored_xids = ?config.xids.ignored(), "starting GPU health monitor");
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("gpu-health".into())
            .spawn(move || {
                let mut watch = Watch::new(gpus, config, tx);
                let set = match nvml.event_set() {
                    Ok(set) => set,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                watch.register(&nvml, &set);
                let _ = ready_tx.send(Ok(()));
                watch.run(&nvml, &set, &flag, &targets);
            })
            .map_err(HealthError::Thread)?;
        let monitor = HealthMonitor {
            stop,
            thread: Some(thread),
            retarget,
        };
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(monitor),
            Ok(Err(e)) => Err(HealthError::Nvml(e)),
            Err(_) => Err(HealthError::SetupLost),
        }
    }

    /// A handle that replaces the watched devices (after a MIG re-partition).
    pub fn retarget(&self) -> Retarget {
        self.retarget.clone()
    }

    /// Stops the thread and waits for it (at most about one `wait`). Changes are sent with
    /// back-pressure, never dropped, so the receiver must keep draining until this returns.
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                tracing::error!("the GPU health monitor thread panicked");
            }
        }
    }
}

impl Drop for HealthMonitor {
    fn drop(&mut self) {
        self.halt();
    }
}

/// What put a device down, which decides how it comes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FaultKind {
    /// A critical Xid: back once it probes fine and `xid_hold` passed without another.
    Xid,
    /// The GPU is lost: back at the first successful probe.
    Lost,
    /// `nvmlEventSetWait_v2` failed: back once a wait succeeds and the GPU probes fine.
    WaitFailed,
    /// It could not be registered for events, so its health is unknown: never back (as NVIDIA).
    Unmonitored,
}

/// Why a device is unhealthy.
#[derive(Debug, Clone)]
struct Fault {
    reason: String,
    since: Instant,
    kind: FaultKind,
}

/// The monitor thread's state: watched devices and the faults of unhealthy ones, keyed by
/// `(gpu uuid, mig uuid)`.
struct Watch {
    gpus: Vec<WatchedGpu>,
    config: HealthConfig,
    tx: Sender<HealthChange>,
    faults: BTreeMap<(String, Option<String>), Fault>,
    /// GPUs registered with the event set (NVML cannot take one off it).
    registered: std::collections::BTreeSet<String>,
    /// The last `nvmlEventSetWait_v2` succeeded (or timed out).
    wait_ok: bool,
    closed: bool,
}

mod retarget;
mod watch;

pub use retarget::Retarget;
use retarget::Targets;

#[cfg(test)]
pub(crate) mod mock_tests;
