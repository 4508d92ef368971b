//! The driver's side of a MIG re-partition: which devices prepared claims hold, the new
//! layout (`crate::layout`), and waking the publisher.

use std::collections::BTreeMap;
use std::sync::Arc;

use gpuhook_node::Inventory;

use super::Driver;
use crate::devices::NodeDevice;
use crate::layout::Layout;

impl Driver {
    /// The node's current layout (a snapshot: a re-partition replaces it, not this copy).
    pub fn layout(&self) -> Layout {
        self.layout
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The node's devices now.
    pub fn devices(&self) -> Arc<Vec<NodeDevice>> {
        self.layout().devices
    }

    pub fn inventory(&self) -> Arc<Inventory> {
        self.layout().inventory
    }

    /// Device name → the claim (`namespace/name`) of every device a claim in the checkpoint holds.
    pub fn held(&self) -> BTreeMap<String, String> {
        let cp = self.checkpoint.lock().unwrap_or_else(|p| p.into_inner());
        cp.claims()
            .flat_map(|(_, e)| {
                let claim = format!("{}/{}", e.namespace, e.name);
                e.devices
                    .iter()
                    .map(move |d| (d.device.clone(), claim.clone()))
            })
            .collect()
    }

    /// Takes the node as re-read after a MIG re-partition (`inventory`, `devices`): devices held
    /// by prepared claims are kept (see `layout.rs`); the publisher is woken when the devices
    /// changed (returned), not for a new inventory alone (e.g. a MIG device this plugin made for
    /// a partitionable placement, which the slices already show as that placement).
    pub fn relayout(&self, inventory: Arc<Inventory>, devices: Vec<NodeDevice>) -> bool {
        let held = self.held();
        let mut l = self.layout.write().unwrap_or_else(|p| p.into_inner());
        let next = l.next(inventory, devices, &held);
        let changed = next.devices != l.devices || next.retired != l.retired;
        *l = next;
        drop(l);
        if changed {
            self.changed.notify_one();
        }
        changed
    }

    /// The MIG backend of partitionable MIG devices (`None`: off).
    pub fn partitioner(&self) -> Option<Arc<crate::dynmig::Partitioner>> {
        self.partitioner.clone()
    }

    /// What to publish now: devices, and the UUIDs of retired ones to taint. A partitionable
    /// placement a prepared claim made a MIG device for carries that device's UUID while it
    /// exists, so the device's health (an Xid of its GPU/compute instance) is the placement's:
    /// tainted in the slices and Unhealthy on the health stream.
    pub fn published(&self) -> (Vec<NodeDevice>, Vec<String>) {
        let (mut devices, retired) = self.layout().published(&self.held());
        let made = self.made_uuids();
        for d in devices.iter_mut().filter(|d| d.uuid.is_empty()) {
            if let Some(uuid) = made.get(&d.name) {
                d.uuid.clone_from(uuid);
            }
        }
        (devices, retired)
    }

    /// Placement device name → the UUID of the MIG device a prepared claim made for it.
    fn made_uuids(&self) -> BTreeMap<String, String> {
        let cp = self.checkpoint.lock().unwrap_or_else(|p| p.into_inner());
        cp.claims()
            .flat_map(|(_, e)| e.mig.iter())
            .filter_map(|r| Some((r.device.clone(), r.uuid.clone()?)))
            .collect()
    }

    /// Wakes when what to publish changed.
    pub async fn changed(&self) {
        self.changed.notified().await
    }

    /// Whether the plugin makes MIG devices itself (partitionable MIG devices).
    pub fn partitioned(&self) -> bool {
        self.partitioner.is_some()
    }
}
