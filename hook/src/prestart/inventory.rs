//! The node inventory on the container start path, without NVML.
//!
//! `gpuhook cdi generate` saves the inventory to the `inventory-cache` file; the hook loads it
//! after one small read of `<driver-root>/proc/driver/nvidia/version` (a driver upgrade changes
//! it). Only when the cache is missing or stale does the hook run discovery (NVML included) and
//! rewrite the cache, so the next container start is fast again.

use std::path::Path;

use gpuhook_node::{DiscoverOptions, Inventory};

use super::error::PrestartError;
use crate::config::Config;

/// Where the inventory came from (for the log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InventorySource {
    Cache,
    /// Discovered now; the cache was missing or stale.
    Discovered,
}

/// Loads the inventory for `config`: the fresh cache, else live discovery (saved back).
pub fn load_inventory(config: &Config) -> Result<(Inventory, InventorySource), PrestartError> {
    let cache = config.inventory_cache.as_path();
    let inv_err = |reason: String| PrestartError::Inventory {
        cache: cache.to_path_buf(),
        reason,
    };
    match gpuhook_node::load_fresh(cache, &config.driver_root) {
        Ok(Some(inv)) if dev_root_matches(&inv, config) => {
            return Ok((inv, InventorySource::Cache))
        }
        Ok(Some(_)) => {
            tracing::info!(cache = %cache.display(), "inventory cache has another dev-root; rediscovering")
        }
        Ok(None) => {
            tracing::info!(cache = %cache.display(), "inventory cache missing or stale; rediscovering")
        }
        Err(e) => {
            tracing::warn!(cache = %cache.display(), error = %e, "inventory cache unreadable; rediscovering")
        }
    }
    let opts = DiscoverOptions {
        driver_root: config.driver_root.clone(),
        dev_root: config.dev_root.clone(),
        nvml_lib: None,
    };
    let discovery = gpuhook_node::discover(&opts).map_err(|e| inv_err(e.to_string()))?;
    for w in &discovery.warnings {
        tracing::warn!(warning = %w, "discovery");
    }
    save(&discovery.inventory, cache);
    Ok((discovery.inventory, InventorySource::Discovered))
}

fn dev_root_matches(inv: &Inventory, config: &Config) -> bool {
    inv.dev_root == config.dev_root()
}

/// Best effort: a read-only /var/run must not stop containers from starting.
fn save(inv: &Inventory, cache: &Path) {
    if let Some(dir) = cache.parent() {
        if let Err(e) = std::fs::create_dir_all(dir) {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot create the inventory cache directory");
            return;
        }
    }
    match inv.save_json(cache) {
        Ok(()) => tracing::info!(cache = %cache.display(), "inventory cache rewritten"),
        Err(e) => {
            tracing::warn!(cache = %cache.display(), error = %e, "cannot write the inventory cache")
        }
    }
}
