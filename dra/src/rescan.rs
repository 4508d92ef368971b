//! Following MIG re-partitions without a restart.
//!
//! The mechanism is the device plugin's (`gpuhook_device_plugin::source::device_files` and
//! `changes::stamp`): every `poll`, the (mtime, size, inode) of each GPU's MIG capability
//! directory under `<driver root>/proc/driver/nvidia/capabilities/gpu<minor>/mig` and of its
//! `gi<N>` entries (or of the inventory file given with `--inventory`) is compared with the last
//! one. The driver creates and removes those entries with every GPU and compute instance, so a
//! re-partition by any tool changes the stamp. Only then is the node re-read and the catalogue
//! rebuilt; the publisher is woken only when the devices changed and replaces the slices only
//! when their content differs (new pool generation, `publish.rs`); devices that prepared claims
//! hold are kept (`layout.rs`). The first poll always re-reads (a change between the start and
//! the watch is not missed).
//!
//! With partitionable MIG devices (`--sharing …,partitionable-mig`) the re-read catalogue is the
//! partitionable one (`partition::read`): MIG devices another tool made since are subtracted,
//! those it destroyed are given back. The plugin's own creates and destroys move the stamp too,
//! but are known under the MIG lock as its own and leave the catalogue as it was: nothing is
//! published for them.
//!
//! After a re-read, the NVML health monitor watches the node's new devices (`Followers`) before
//! the new catalogue is taken, so an event of a new MIG device is never matched against the old
//! layout, and the health streams report the new devices.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use gpuhook_device_plugin::changes::{stamp, Stamp};
use gpuhook_device_plugin::health::Retarget;
use gpuhook_device_plugin::monitor::watched_gpus;
use gpuhook_device_plugin::source::{device_files, InventoryFrom};
use gpuhook_node::bounded::{read_bounded, MAX_CONFIG_FILE_BYTES};
use gpuhook_node::Inventory;
use tokio::sync::watch;

use crate::devices::{catalogue, NodeDevice};
use crate::driver::Driver;
use crate::health_service::Unhealthy;

/// Where the node's devices are read from, and how often the stamp is compared.
#[derive(Debug, Clone)]
pub struct Rescan {
    pub from: InventoryFrom,
    /// The root whose `/sys` gives the PCIe roots (as `RunOptions::sys_root`).
    pub sys_root: PathBuf,
    pub poll: Duration,
}

/// What follows the node's devices besides the slices.
#[derive(Debug, Clone, Default)]
pub struct Followers {
    /// The NVML health monitor: watches the devices as re-read.
    pub monitor: Option<Retarget>,
    /// The health state: touched when the devices changed, so the health streams report them.
    pub health: Option<watch::Sender<Unhealthy>>,
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

fn minors(driver: &Driver) -> Vec<u32> {
    driver.inventory().gpus.iter().map(|g| g.minor).collect()
}

fn current_stamp(driver: &Driver, from: &InventoryFrom) -> Stamp {
    stamp(&device_files(from, minors(driver)))
}

/// The node re-read: its inventory and catalogue (partitionable with a MIG backend).
fn reread(driver: &Driver, r: &Rescan) -> Result<(Inventory, Vec<NodeDevice>), String> {
    let inv = load(&r.from)?;
    let devices = match driver.partitioner() {
        None => catalogue(&inv, &r.sys_root),
        Some(p) => crate::partition::read(&p, || claims(driver), &inv, &r.sys_root)?,
    };
    Ok((inv, devices))
}

/// The checkpointed claims holding MIG devices this plugin made.
fn claims(driver: &Driver) -> Vec<crate::checkpoint::ClaimEntry> {
    driver.claims_with_mig().into_iter().map(|c| c.1).collect()
}

/// One comparison: re-reads the node when the stamp moved, has the health monitor watch its
/// devices and hands the new catalogue to the driver. Returns the stamp to compare with next.
pub fn step(driver: &Driver, r: &Rescan, last: Stamp, f: &Followers) -> Stamp {
    let before = minors(driver);
    let now = current_stamp(driver, &r.from);
    if now == last {
        return last;
    }
    match reread(driver, r) {
        Ok((inv, devices)) => {
            if let Some(m) = &f.monitor {
                m.set(watched_gpus(&inv));
            }
            let n = devices.len();
            if driver.relayout(Arc::new(inv), devices) {
                tracing::info!(
                    devices = n,
                    "node devices changed (MIG capability directories moved)"
                );
                if let Some(h) = &f.health {
                    h.send_modify(|_| {});
                }
            } else {
                tracing::debug!("node re-read after a MIG capability change: same devices");
            }
            // Stamped before the read: a change during it is seen at the next poll. A new GPU
            // set has other directories: re-read at the next poll, stamping those.
            if minors(driver) == before {
                now
            } else {
                Stamp::default()
            }
        }
        Err(e) => {
            tracing::error!(error = %e, "cannot re-read the node's devices; retrying at the next change");
            now
        }
    }
}

/// Compares every `poll` until aborted (the first poll re-reads).
pub fn spawn(driver: Arc<Driver>, r: Rescan, f: Followers) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut last = Stamp::default();
        loop {
            let (d, rr, ff) = (driver.clone(), r.clone(), f.clone());
            let prev = std::mem::take(&mut last);
            match tokio::task::spawn_blocking(move || step(&d, &rr, prev, &ff)).await {
                Ok(s) => last = s,
                Err(e) => tracing::error!(error = %e, "MIG re-partition watch failed"),
            }
            tokio::time::sleep(r.poll).await;
        }
    })
}
