//! Following MIG re-partitions of static MIG devices without a restart.
//!
//! The mechanism is the device plugin's (`gpuhook_device_plugin::source::device_files` and
//! `changes::stamp`): every `poll`, the (mtime, size, inode) of each GPU's MIG capability
//! directory under `<driver root>/proc/driver/nvidia/capabilities/gpu<minor>/mig` and of its
//! `gi<N>` entries (or of the inventory file given with `--inventory`) is compared with the last
//! one. The driver creates and removes those entries with every GPU and compute instance, so a
//! re-partition by any tool changes the stamp. Only then is the node re-read and the catalogue
//! rebuilt; the publisher replaces the slices only when their content differs (new pool
//! generation, `publish.rs`), and devices that prepared claims hold are kept (`layout.rs`).
//!
//! Not with partitionable MIG devices (`--sharing …,partitionable-mig`): there the slices carry
//! placements, and the plugin makes the MIG devices itself.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use gpuhook_device_plugin::changes::{stamp, Stamp};
use gpuhook_device_plugin::source::{device_files, InventoryFrom};
use gpuhook_node::bounded::{read_bounded, MAX_CONFIG_FILE_BYTES};
use gpuhook_node::Inventory;

use crate::devices::catalogue;
use crate::driver::Driver;

/// Where the node's devices are read from, and how often the stamp is compared.
#[derive(Debug, Clone)]
pub struct Rescan {
    pub from: InventoryFrom,
    /// The root whose `/sys` gives the PCIe roots (as `RunOptions::sys_root`).
    pub sys_root: PathBuf,
    pub poll: Duration,
}

/// Reads the node's inventory from `from`.
pub fn load(from: &InventoryFrom) -> Result<Inventory, String> {
    match from {
        InventoryFrom::Discover(opts) => {
            let d = gpuhook_node::discover(opts).map_err(|e| e.to_string())?;
            for w in &d.warnings {
                tracing::warn!(warning = %w, "discovery");
            }
            Ok(d.inventory)
        }
        InventoryFrom::File(path) => {
            let bytes = read_bounded(path, MAX_CONFIG_FILE_BYTES).map_err(|e| e.to_string())?;
            serde_json::from_slice(&bytes)
                .map_err(|e| format!("{} is not a gpuhook inventory: {e}", path.display()))
        }
    }
}

fn current_stamp(driver: &Driver, from: &InventoryFrom) -> Stamp {
    let minors: Vec<u32> = driver.inventory().gpus.iter().map(|g| g.minor).collect();
    stamp(&device_files(from, minors))
}

/// One comparison: re-reads the node and hands the new catalogue to the driver when the stamp
/// moved. Returns the stamp to compare with next.
pub fn step(driver: &Driver, r: &Rescan, last: Stamp) -> Stamp {
    let now = current_stamp(driver, &r.from);
    if now == last {
        return last;
    }
    match load(&r.from) {
        Ok(inv) => {
            let devices = catalogue(&inv, &r.sys_root);
            tracing::info!(
                devices = devices.len(),
                "node devices re-read after a change of the MIG capability directories"
            );
            driver.relayout(Arc::new(inv), devices);
            // The GPU set may have changed: stamp what the new inventory names.
            current_stamp(driver, &r.from)
        }
        Err(e) => {
            tracing::error!(error = %e, "cannot re-read the node's devices; retrying at the next change");
            now
        }
    }
}

/// Compares every `poll` until aborted.
pub fn spawn(driver: Arc<Driver>, r: Rescan) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let (d, from) = (driver.clone(), r.from.clone());
        let mut last = tokio::task::spawn_blocking(move || current_stamp(&d, &from))
            .await
            .unwrap_or_default();
        loop {
            tokio::time::sleep(r.poll).await;
            let (d, rr) = (driver.clone(), r.clone());
            let prev = std::mem::take(&mut last);
            match tokio::task::spawn_blocking(move || step(&d, &rr, prev)).await {
                Ok(s) => last = s,
                Err(e) => tracing::error!(error = %e, "MIG re-partition watch failed"),
            }
        }
    })
}
