//! The node's devices as the plugin last read them, and what a MIG re-partition makes of them.
//!
//! A re-partition (gpuhook-mig-parted, NVIDIA's mig-parted, the MIG manager) replaces the static
//! MIG devices of a GPU. The plugin then publishes the new catalogue, with one exception: a
//! device that a prepared claim holds (in the checkpoint) and that the re-partition removed is
//! **kept** in the slices, tainted `gpu.nvidia.com/unhealthy` with the value
//! `RemovedWhilePrepared` (NoSchedule), and logged at error level with the claim's name, until
//! the claim is unprepared. So the scheduler keeps seeing the allocated device (its claim is
//! not orphaned) and gives it to no one else, and the admin sees why. With
//! `--unhealthy withdraw` it is withdrawn like an unhealthy device (the log line remains). A new
//! device that takes the same name (same GPU, profile and GI/CI ids) wins: the claim's old device
//! cannot be published beside it, which is logged the same way.

use std::collections::BTreeMap;
use std::sync::Arc;

use gpuhook_node::Inventory;

use crate::devices::NodeDevice;

/// The taint value of a device a re-partition removed while a claim held it.
pub const REMOVED_WHILE_PREPARED: &str = "RemovedWhilePrepared";

/// The node's devices: the inventory they came from and the catalogue (retired devices included).
#[derive(Debug, Clone)]
pub struct Layout {
    pub inventory: Arc<Inventory>,
    pub devices: Arc<Vec<NodeDevice>>,
    /// Device names gone from the node while a claim held them (kept and tainted).
    pub retired: Vec<String>,
}

impl Layout {
    pub fn new(inventory: Arc<Inventory>, devices: Vec<NodeDevice>) -> Self {
        Layout {
            inventory,
            devices: Arc::new(devices),
            retired: Vec::new(),
        }
    }

    /// The layout after a re-read of the node (`inventory`, `fresh`); `held`: device name →
    /// the claim (`namespace/name`) that holds it.
    pub fn next(
        &self,
        inventory: Arc<Inventory>,
        fresh: Vec<NodeDevice>,
        held: &BTreeMap<String, String>,
    ) -> Layout {
        let mut devices = fresh;
        let mut retired = Vec::new();
        for old in self.devices.iter() {
            let Some(claim) = held.get(&old.name) else {
                continue;
            };
            match devices.iter().find(|d| d.name == old.name) {
                Some(d) if d.uuid == old.uuid => {}
                Some(d) => {
                    tracing::error!(device = %old.name, old_uuid = %old.uuid, new_uuid = %d.uuid, %claim,
                    "a MIG re-partition replaced a device prepared for a claim; the new device is published under its name")
                }
                None => {
                    tracing::error!(device = %old.name, uuid = %old.uuid, %claim,
                        "a MIG re-partition removed a device prepared for a claim; it stays published, tainted, until the claim is unprepared");
                    retired.push(old.name.clone());
                    devices.push(old.clone());
                }
            }
        }
        Layout {
            inventory,
            devices: Arc::new(devices),
            retired,
        }
    }

    /// What to publish: the devices without the retired ones no claim holds any more, and the
    /// retired ones held as UUID → taint value.
    pub fn published(&self, held: &BTreeMap<String, String>) -> (Vec<NodeDevice>, Vec<String>) {
        let mut tainted = Vec::new();
        let devices = self
            .devices
            .iter()
            .filter(|d| {
                if !self.retired.contains(&d.name) {
                    return true;
                }
                let keep = held.contains_key(&d.name);
                if keep {
                    tainted.push(d.uuid.clone());
                }
                keep
            })
            .cloned()
            .collect();
        (devices, tainted)
    }
}

#[cfg(test)]
#[path = "layout_tests.rs"]
mod tests;
