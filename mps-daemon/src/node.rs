//! GPU facts and compute-mode control from the real node (gpuhook-node discovery + NVML).
//!
//! Kept apart from the rest so that everything else depends only on the traits of
//! [`crate::inventory`]. Discovery runs again on every reload, so GPUs added to the node are
//! seen by a SIGHUP.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use gpuhook_node::{discover, ComputeMode, DiscoverOptions, Inventory, Nvml, NvmlLocation};

use crate::inventory::{
    ComputeModeError, ComputeModeSetter, GpuInventory, InventoryError, NoComputeMode,
};

/// GPU facts from [`gpuhook_node::discover`].
#[derive(Debug, Clone)]
pub struct DiscoveredInventory {
    pub driver_root: PathBuf,
    pub nvml_lib: Option<PathBuf>,
}

impl GpuInventory for DiscoveredInventory {
    fn inventory(&self) -> Result<Inventory, InventoryError> {
        let opts = DiscoverOptions {
            driver_root: self.driver_root.clone(),
            dev_root: None,
            nvml_lib: self.nvml_lib.clone(),
        };
        let d = discover(&opts).map_err(InventoryError::Discovery)?;
        for w in &d.warnings {
            tracing::warn!(warning = %w, "discovery");
        }
        Ok(d.inventory)
    }
}

/// Compute modes through the driver root's NVML.
#[derive(Debug)]
pub struct NvmlComputeMode(pub Nvml);

impl ComputeModeSetter for NvmlComputeMode {
    fn set_compute_mode(
        &self,
        uuid: &str,
        mode: ComputeMode,
    ) -> Result<ComputeMode, ComputeModeError> {
        let prev = self.0.compute_mode(uuid)?;
        if prev != mode {
            self.0.set_compute_mode(uuid, mode)?;
        }
        Ok(prev)
    }
}

/// Discovery-backed GPU facts and NVML compute-mode control for `driver_root` (cannot fail:
/// without NVML the compute mode is left alone, as [`NoComputeMode`] logs).
pub fn access(
    driver_root: &Path,
    nvml_lib: Option<&Path>,
) -> (Box<dyn GpuInventory>, Arc<dyn ComputeModeSetter>) {
    let inventory = DiscoveredInventory {
        driver_root: driver_root.to_path_buf(),
        nvml_lib: nvml_lib.map(Path::to_path_buf),
    };
    let compute: Arc<dyn ComputeModeSetter> =
        match NvmlLocation::locate(driver_root, nvml_lib).and_then(|l| Nvml::load(&l)) {
            Ok(nvml) => Arc::new(NvmlComputeMode(nvml)),
            Err(e) => Arc::new(NoComputeMode {
                reason: format!("NVML unavailable: {e}"),
            }),
        };
    (Box::new(inventory), compute)
}
