//! Replacing the monitor's watched devices while it runs: after a MIG re-partition the GPU
//! and compute instance ids of an event name other MIG devices (new UUIDs, possibly the old
//! ids), so events must be matched against the node as it is now.
//!
//! The new set is handed to the monitor thread, which takes it before its next event wait, and
//! [`Retarget::set`] returns once it has: an event raised after that is matched against the new
//! devices. What the thread does with it:
//! - faults of devices still watched are kept (a GPU down with a critical Xid stays down
//!   whatever its MIG layout became);
//! - a device no longer watched is forgotten; if it was down, one last change (`healthy`, reason
//!   "no longer on the node") lets the receiver forget it too;
//! - a new MIG device of a GPU that is down is down with it (same reason, same fault: it comes
//!   back with the GPU);
//! - a GPU not registered for events yet is registered (NVML cannot take one off an event set;
//!   events of a GPU no longer watched are ignored, as those of any device not watched).

use std::collections::BTreeSet;
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::time::Duration;

use gpuhook_node::nvml::events::EventSet;
use gpuhook_node::Nvml;

use super::watch::{all_keys, Key};
use super::{Watch, WatchedGpu};

/// The longest [`Retarget::set`] waits for the thread (normally one event wait at most).
const TAKE_TIMEOUT: Duration = Duration::from_secs(30);

/// A new set of devices, and where the thread says it took it.
type Request = (Vec<WatchedGpu>, SyncSender<()>);

/// The thread's end of the channel.
pub(super) type Targets = Receiver<Request>;

/// Replaces the devices a running [`super::HealthMonitor`] watches; cheap to clone.
#[derive(Debug, Clone)]
pub struct Retarget {
    tx: Sender<Request>,
}

pub(super) fn channel() -> (Retarget, Targets) {
    let (tx, rx) = mpsc::channel();
    (Retarget { tx }, rx)
}

impl Retarget {
    /// Makes the monitor watch `gpus` (every GPU and MIG device of the node as re-read) and
    /// returns once its thread does. A stopped monitor, or one with health checks disabled:
    /// nothing to do.
    pub fn set(&self, gpus: Vec<WatchedGpu>) {
        let (taken, done) = mpsc::sync_channel(1);
        if self.tx.send((gpus, taken)).is_err() {
            return;
        }
        // Disconnected: the thread ended (its requests are dropped with it).
        if let Err(mpsc::RecvTimeoutError::Timeout) = done.recv_timeout(TAKE_TIMEOUT) {
            tracing::warn!(
                timeout = ?TAKE_TIMEOUT,
                "the GPU health monitor has not taken the new devices yet; it will before its next event wait"
            );
        }
    }
}

impl Watch {
    /// Watches `gpus` from now on (see the module).
    pub(super) fn retarget(&mut self, nvml: &Nvml, set: &EventSet<'_>, gpus: Vec<WatchedGpu>) {
        self.gpus = gpus;
        let keys: BTreeSet<Key> = self.gpus.iter().flat_map(all_keys).collect();
        let gone: Vec<Key> = self
            .faults
            .keys()
            .filter(|k| !keys.contains(*k))
            .cloned()
            .collect();
        for key in gone {
            if self.faults.remove(&key).is_some() {
                self.send(key, true, "no longer on the node".into());
            }
        }
        let mut inherit = Vec::new();
        for g in &self.gpus {
            let Some(fault) = self.faults.get(&(g.uuid.clone(), None)) else {
                continue;
            };
            for m in &g.migs {
                let key = (g.uuid.clone(), Some(m.uuid.clone()));
                if !self.faults.contains_key(&key) {
                    inherit.push((key, fault.clone()));
                }
            }
        }
        for (key, fault) in inherit {
            let reason = fault.reason.clone();
            self.faults.insert(key.clone(), fault);
            self.send(key, false, reason);
        }
        self.register(nvml, set);
        tracing::info!(
            gpus = self.gpus.len(),
            devices = keys.len(),
            "GPU health monitor: watched devices replaced"
        );
    }
}
