//! The monitor thread's loop: event handling, loss probes and recovery (see the parent module).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use gpuhook_node::nvml::events::{Event, EventSet, ERROR_GPU_IS_LOST, EVENT_XID_CRITICAL};
use gpuhook_node::{NodeError, Nvml};

use super::{
    events, Fault, FaultKind, HealthChange, HealthConfig, Sender, Targets, Watch, WatchedGpu,
    XID_GPU_LOST,
};

/// Events registered, as NVIDIA registers them (only Xids are acted on).
const WANTED: u64 =
    EVENT_XID_CRITICAL | events::EVENT_DOUBLE_BIT_ECC | events::EVENT_SINGLE_BIT_ECC;

pub(super) type Key = (String, Option<String>);

/// NVIDIA's `matchesMigEvent`: an id the event does not carry (`None`) matches any.
pub(super) fn matches_mig(gi: u32, ci: u32, event: &Event) -> bool {
    event.gpu_instance.is_none_or(|g| g == gi) && event.compute_instance.is_none_or(|c| c == ci)
}

fn is_lost(e: &NodeError) -> bool {
    matches!(e, NodeError::Nvml { code, .. } if *code == ERROR_GPU_IS_LOST)
}

/// The GPU and every advertised MIG device of it.
pub(super) fn all_keys(gpu: &WatchedGpu) -> Vec<Key> {
    std::iter::once((gpu.uuid.clone(), None))
        .chain(
            gpu.migs
                .iter()
                .map(|m| (gpu.uuid.clone(), Some(m.uuid.clone()))),
        )
        .collect()
}

impl Watch {
    pub(super) fn new(
        gpus: Vec<WatchedGpu>,
        config: HealthConfig,
        tx: Sender<HealthChange>,
    ) -> Self {
        Watch {
            gpus,
            config,
            tx,
            faults: Default::default(),
            registered: Default::default(),
            wait_ok: true,
            closed: false,
        }
    }

    /// Registers every GPU not registered yet; one that cannot be registered is unhealthy (as
    /// NVIDIA).
    pub(super) fn register(&mut self, nvml: &Nvml, set: &EventSet<'_>) {
        for i in 0..self.gpus.len() {
            let uuid = self.gpus[i].uuid.clone();
            if self.registered.contains(&uuid) {
                continue;
            }
            let result = nvml
                .device_by_uuid(&uuid)
                .and_then(|dev| set.register(&dev, WANTED));
            match result {
                Ok(_) => {
                    self.registered.insert(uuid);
                }
                Err(e) => {
                    tracing::warn!(gpu = %uuid, error = %e, "cannot register for NVML events");
                    let keys = all_keys(&self.gpus[i]);
                    let reason = format!("cannot register for NVML events: {e}");
                    self.mark(keys, &reason, FaultKind::Unmonitored);
                }
            }
        }
    }

    /// Waits for events and probes until `stop` is set or the receiver is gone; takes every new
    /// set of devices from `targets` before each wait.
    pub(super) fn run(
        &mut self,
        nvml: &Nvml,
        set: &EventSet<'_>,
        stop: &AtomicBool,
        targets: &Targets,
    ) {
        let mut last_probe = Instant::now();
        while !stop.load(Ordering::Relaxed) && !self.closed {
            for (gpus, taken) in targets.try_iter() {
                self.retarget(nvml, set, gpus);
                let _ = taken.send(());
            }
            let waited = set.wait(self.config.wait);
            self.wait_ok = waited.is_ok();
            match waited {
                Ok(Some(event)) => self.on_event(&event),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "NVML event wait failed; marking all devices unhealthy");
                    let keys = self.gpus.iter().flat_map(all_keys).collect();
                    let reason = format!("NVML event wait failed: {e}");
                    self.mark(keys, &reason, FaultKind::WaitFailed);
                    std::thread::sleep(self.config.wait);
                }
            }
            if last_probe.elapsed() >= self.config.probe_interval {
                self.probe(nvml);
                last_probe = Instant::now();
            }
        }
    }

    fn on_event(&mut self, event: &Event) {
        if event.event_type != EVENT_XID_CRITICAL {
            tracing::info!(event_type = event.event_type, gpu = ?event.gpu_uuid, "skipping non-Xid event");
            return;
        }
        let xid = event.data;
        if self.config.xids.is_disabled(xid) {
            tracing::info!(xid, gpu = ?event.gpu_uuid, "skipping ignored Xid");
            return;
        }
        let kind = if xid == XID_GPU_LOST {
            FaultKind::Lost
        } else {
            FaultKind::Xid
        };
        let reason = format!("critical Xid {xid}");
        let Some(uuid) = &event.gpu_uuid else {
            tracing::warn!(
                xid,
                "Xid on a device NVML cannot name; marking all devices unhealthy"
            );
            let keys = self.gpus.iter().flat_map(all_keys).collect();
            self.mark(keys, &reason, kind);
            return;
        };
        let Some(gpu) = self.gpus.iter().find(|g| &g.uuid == uuid) else {
            tracing::info!(xid, gpu = %uuid, "ignoring event for a device not advertised");
            return;
        };
        let keys = if event.gpu_instance.is_none() && event.compute_instance.is_none() {
            all_keys(gpu)
        } else {
            let migs = gpu.migs.iter().filter(|m| matches_mig(m.gi, m.ci, event));
            migs.map(|m| (gpu.uuid.clone(), Some(m.uuid.clone())))
                .collect()
        };
        tracing::warn!(xid, gpu = %uuid, devices = keys.len(), "critical Xid; marking unhealthy");
        self.mark(keys, &reason, kind);
    }

    /// Probes every GPU: a lost one goes unhealthy, a healed one comes back.
    fn probe(&mut self, nvml: &Nvml) {
        for i in 0..self.gpus.len() {
            let gpu = &self.gpus[i];
            let result = nvml
                .device_by_uuid(&gpu.uuid)
                .and_then(|d| d.memory_total());
            let keys = all_keys(gpu);
            match result {
                Err(e) if is_lost(&e) => self.mark(keys, "GPU is lost", FaultKind::Lost),
                Err(e) => tracing::debug!(gpu = %gpu.uuid, error = %e, "health probe failed"),
                Ok(_) => self.recover(keys),
            }
        }
    }

    fn mark(&mut self, keys: Vec<Key>, reason: &str, kind: FaultKind) {
        for key in keys {
            let fault = Fault {
                reason: reason.to_string(),
                since: Instant::now(),
                kind,
            };
            // A new Xid restarts the hold of a device already down; only the first is sent.
            if self.faults.insert(key.clone(), fault).is_none() {
                self.send(key, false, reason.to_string());
            }
        }
    }

    fn recover(&mut self, keys: Vec<Key>) {
        for key in keys {
            let healed = self.faults.get(&key).is_some_and(|f| match f.kind {
                FaultKind::Lost => true,
                FaultKind::Xid => f.since.elapsed() >= self.config.xid_hold,
                FaultKind::WaitFailed => self.wait_ok,
                FaultKind::Unmonitored => false,
            });
            if let Some(fault) = healed.then(|| self.faults.remove(&key)).flatten() {
                self.send(key, true, format!("recovered from: {}", fault.reason));
            }
        }
    }

    pub(super) fn send(&mut self, (gpu_uuid, mig_uuid): Key, healthy: bool, reason: String) {
        tracing::info!(gpu = %gpu_uuid, mig = ?mig_uuid, healthy, reason = %reason, "device health changed");
        let change = HealthChange {
            gpu_uuid,
            mig_uuid,
            healthy,
            reason,
        };
        if self.tx.blocking_send(change).is_err() {
            tracing::info!("health change receiver closed; stopping the monitor");
            self.closed = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(gi: Option<u32>, ci: Option<u32>) -> Event {
        Event {
            gpu_uuid: Some("GPU-a".into()),
            event_type: EVENT_XID_CRITICAL,
            data: 48,
            gpu_instance: gi,
            compute_instance: ci,
        }
    }

    /// NVIDIA `health_test.go:TestMatchesMigEvent`, its six cases.
    #[test]
    fn mig_matching_as_nvidia() {
        assert!(matches_mig(3, 0, &event(Some(3), Some(0))));
        assert!(matches_mig(3, 0, &event(Some(3), None)));
        assert!(!matches_mig(5, 0, &event(Some(3), None)));
        assert!(matches_mig(3, 0, &event(None, Some(0))));
        assert!(!matches_mig(3, 1, &event(None, Some(0))));
        assert!(matches_mig(3, 0, &event(None, None)));
    }
}
