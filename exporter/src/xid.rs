//! `DCGM_FI_DEV_XID_ERRORS`: the last critical Xid of each GPU (and MIG GPU instance), from an
//! NVML event set (`nvmlEventTypeXidCriticalError`, waited on by a thread of its own, as DCGM
//! does). Xid 79, a GPU fallen off the bus, is also logged.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gpuhook_node::nvml::events::EVENT_XID_CRITICAL;
use gpuhook_node::Nvml;

use crate::devices::GpuInfo;

/// Last Xid per `(GPU UUID, GPU instance id)`.
pub type XidTable = Arc<Mutex<BTreeMap<(String, Option<u32>), u64>>>;

/// Xid 79: "GPU has fallen off the bus".
pub const XID_GPU_LOST: u64 = 79;

/// Starts the event thread; `false` when NVML offers no events (the XID field is then absent).
pub fn start(nvml: Arc<Nvml>, gpus: &[GpuInfo], table: XidTable) -> bool {
    let indexes: Vec<u32> = gpus.iter().map(|g| g.index).collect();
    let (tx, rx) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("xid-events".into())
        .spawn(move || {
            let set = match nvml.event_set() {
                Ok(s) => s,
                Err(e) => {
                    let _ = tx.send(false);
                    tracing::warn!(error = %e, "no NVML events: DCGM_FI_DEV_XID_ERRORS is not served");
                    return;
                }
            };
            for i in &indexes {
                let registered = nvml
                    .device_by_index(*i)
                    .and_then(|d| set.register(&d, EVENT_XID_CRITICAL));
                if let Err(e) = registered {
                    tracing::warn!(gpu = i, error = %e, "cannot watch this GPU's Xid events");
                }
            }
            let _ = tx.send(true);
            loop {
                match set.wait(Duration::from_secs(1)) {
                    Ok(Some(ev)) => record(&table, &ev),
                    Ok(None) => {}
                    Err(e) => {
                        tracing::debug!(error = %e, "NVML event wait failed");
                        std::thread::sleep(Duration::from_secs(1));
                    }
                }
            }
        });
    spawned.is_ok() && rx.recv().unwrap_or(false)
}

fn record(table: &XidTable, ev: &gpuhook_node::nvml::Event) {
    if ev.event_type & EVENT_XID_CRITICAL == 0 {
        return;
    }
    let Some(uuid) = ev.gpu_uuid.clone() else {
        return;
    };
    if ev.data == XID_GPU_LOST {
        tracing::error!(uuid = %uuid, xid = ev.data, "GPU has fallen off the bus");
    } else {
        tracing::warn!(uuid = %uuid, xid = ev.data, gpu_instance = ?ev.gpu_instance, "critical Xid");
    }
    let mut t = table.lock().unwrap_or_else(|p| p.into_inner());
    t.insert((uuid.clone(), ev.gpu_instance), ev.data);
    if ev.gpu_instance.is_some() {
        // The GPU's own series shows the last Xid of any of its parts too.
        t.insert((uuid, None), ev.data);
    }
}
