//! The few GPU facts the daemon needs, behind traits.
//!
//! The daemon only needs index, UUID, memory and MIG state of each GPU, and a way to switch a GPU
//! to EXCLUSIVE_PROCESS. Keeping that behind [`GpuInventory`] and [`ComputeModeSetter`] lets the
//! supervisor be tested with a fake node and lets the source of facts (NVML discovery, a saved
//! inventory JSON) be chosen by the binary.

use std::path::{Path, PathBuf};

use gpuhook_node::Inventory;

/// One full GPU as the daemon sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuFacts {
    /// NVML index.
    pub index: u32,
    /// `GPU-...`.
    pub uuid: String,
    /// Total memory in MiB (0 when unknown: no memory limit is derived then).
    pub memory_mib: u64,
    /// MIG mode enabled: MPS cannot run on it.
    pub mig_enabled: bool,
    /// UUIDs of its MIG devices, so that a `MIG-...` in the config gets a precise error.
    pub mig_uuids: Vec<String>,
    /// Compute capability (major, minor), when known: MPS replicas are capped by it.
    pub compute_capability: Option<(u32, u32)>,
}

/// Errors getting GPU facts (each cause is part of the message, not also a `source`).
#[derive(Debug, thiserror::Error)]
pub enum InventoryError {
    #[error("cannot read inventory {path}: {error}")]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("cannot read inventory {path}: {error}")]
    Parse {
        path: PathBuf,
        error: serde_json::Error,
    },
    #[error("GPU discovery failed: {0}")]
    Discovery(gpuhook_node::NodeError),
}

/// The node's inventory (for the CDI spec) and the GPU facts derived from it.
pub trait GpuInventory: Send + Sync + std::fmt::Debug {
    fn inventory(&self) -> Result<Inventory, InventoryError>;

    fn gpus(&self) -> Result<Vec<GpuFacts>, InventoryError> {
        Ok(facts_of(&self.inventory()?))
    }
}

pub use gpuhook_node::ComputeMode;

/// Why a GPU's compute mode could not be read or set.
#[derive(Debug, thiserror::Error)]
pub enum ComputeModeError {
    #[error("cannot set the compute mode of {uuid}: {reason}")]
    Unavailable { uuid: String, reason: String },
    #[error(transparent)]
    Nvml(#[from] gpuhook_node::NodeError),
}

/// Sets a GPU's compute mode; returns the previous mode so that it can be restored.
pub trait ComputeModeSetter: Send + Sync + std::fmt::Debug {
    fn set_compute_mode(
        &self,
        uuid: &str,
        mode: ComputeMode,
    ) -> Result<ComputeMode, ComputeModeError>;
}

/// Facts from a serialised [`gpuhook_node::Inventory`] (e.g. `gpuhook cdi generate` output).
#[derive(Debug, Clone)]
pub struct JsonInventory {
    pub path: PathBuf,
}

impl GpuInventory for JsonInventory {
    fn inventory(&self) -> Result<Inventory, InventoryError> {
        let text = std::fs::read_to_string(&self.path).map_err(|error| InventoryError::Read {
            path: self.path.clone(),
            error,
        })?;
        serde_json::from_str(&text).map_err(|error| InventoryError::Parse {
            path: self.path.clone(),
            error,
        })
    }
}

/// GPU facts of an inventory.
pub fn facts_of(inv: &Inventory) -> Vec<GpuFacts> {
    let mut gpus: Vec<GpuFacts> = inv
        .gpus
        .iter()
        .map(|g| GpuFacts {
            index: g.index,
            uuid: g.uuid.clone(),
            memory_mib: g.memory_mib,
            mig_enabled: g.mig_enabled,
            mig_uuids: g.mig_devices.iter().map(|m| m.uuid.clone()).collect(),
            compute_capability: g.compute_capability,
        })
        .collect();
    gpus.sort_by_key(|g| g.index);
    gpus
}

/// A fixed inventory (tests, and callers that discovered GPUs themselves).
#[derive(Debug, Clone)]
pub struct StaticInventory(pub Inventory);

impl GpuInventory for StaticInventory {
    fn inventory(&self) -> Result<Inventory, InventoryError> {
        Ok(self.0.clone())
    }
}

/// Used when no NVML is reachable: logs that the compute mode stays as it is.
#[derive(Debug, Clone, Default)]
pub struct NoComputeMode {
    pub reason: String,
}

impl ComputeModeSetter for NoComputeMode {
    fn set_compute_mode(
        &self,
        uuid: &str,
        _mode: ComputeMode,
    ) -> Result<ComputeMode, ComputeModeError> {
        Err(ComputeModeError::Unavailable {
            uuid: uuid.to_string(),
            reason: self.reason.clone(),
        })
    }
}

/// Path of the driver's control binary under `driver_root`.
pub fn default_control_binary(driver_root: &Path) -> PathBuf {
    gpuhook_node::join_under(driver_root, Path::new("/usr/bin/nvidia-cuda-mps-control"))
}
