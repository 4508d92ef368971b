//! Why a simulated node profile cannot become the mock's device table: what NVML could never
//! report (a malformed version, an unknown architecture, duplicate UUIDs). The message is what
//! `nvmlInit` logs before returning `NVML_ERROR_DRIVER_NOT_LOADED`, so each names the profile
//! key at fault and the fix.

use crate::ffi;

/// A profile value the mock refuses. Nested errors (`Gpu`, `Mig`) put the inner message in
/// their own (field `error`, deliberately not a `source`): it is printed once.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TableError {
    #[error("cuda_driver_version {0:?} must be major.minor, e.g. \"12.8\"")]
    CudaVersion(String),
    #[error("compute_capability {0:?} must be major.minor, e.g. \"8.0\"")]
    ComputeCapability(String),
    #[error(
        "unknown architecture {0:?}: use one of kepler, maxwell, pascal, volta, turing, ampere, ada, hopper, blackwell"
    )]
    Arch(String),
    #[error("unknown brand {0:?}: use one of {names}", names = brand_names())]
    Brand(String),
    #[error("PCI bus id {0:?} must look like 00000000:07:00.0 (domain:bus:device.function, hex)")]
    PciBusId(String),
    /// UUIDs become file names (compute-mode state): only `[A-Za-z0-9-]` after the prefix.
    #[error("UUID {uuid:?} must look like {prefix}<hex and dashes>")]
    Uuid { uuid: String, prefix: &'static str },
    #[error(
        "GPU indexes must be 0..{count} without gaps or duplicates, found index {index} at position {position}: renumber the [[gpus]] entries"
    )]
    GpuIndexes {
        count: usize,
        index: u32,
        position: usize,
    },
    #[error("UUID {0} is used twice: every GPU and MIG device needs its own")]
    DuplicateUuid(String),
    #[error("has [[gpus.mig_devices]] but mig_mode = false: set mig_mode = true")]
    MigDevicesWithoutMigMode,
    #[error("nvlinks = {0} but NVML knows at most {max} links per GPU", max = ffi::NVLINK_MAX_LINKS)]
    TooManyNvlinks(u32),
    /// One GPU of the profile is refused.
    #[error("GPU {index} ({uuid}): {error}")]
    Gpu {
        index: u32,
        uuid: String,
        error: Box<TableError>,
    },
    /// One MIG device of a GPU is refused.
    #[error("MIG device {uuid}: {error}")]
    Mig {
        uuid: String,
        error: Box<TableError>,
    },
}

/// The brand names a profile may use, as `brand = "<name>"` spells them.
fn brand_names() -> String {
    let names: Vec<&str> = ffi::BRANDS.iter().map(|(n, _)| *n).collect();
    names.join(", ")
}
