//! GPU facts and compute-mode control from the real node (gpuhook-node discovery + NVML).
//!
//! Kept apart from the rest so that everything else depends only on the traits of
//! [`crate::inventory`].

use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Result};

use crate::inventory::{ComputeModeSetter, GpuInventory};

/// Discovery-backed GPU facts and NVML compute-mode control for `driver_root`.
pub fn access(driver_root: &Path) -> Result<(Box<dyn GpuInventory>, Arc<dyn ComputeModeSetter>)> {
    bail!(
        "GPU discovery under {} is not available in this build; pass --inventory-json FILE",
        driver_root.display()
    )
}
