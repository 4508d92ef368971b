//! Errors of the MIG manager. Each names the GPU (index, UUID, model) it is about and, where
//! there is one, the fix.

use crate::spec::ConfigError;

#[derive(Debug, thiserror::Error)]
pub enum MigError {
    /// The config file or the selected config name is wrong (nothing was changed).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A config wants a profile this GPU does not have.
    #[error("GPU {index} ({uuid}, {model}) has no MIG profile {profile}: it has {available}")]
    UnknownProfile {
        index: u32,
        uuid: String,
        model: String,
        profile: String,
        available: String,
    },
    /// The wanted devices do not fit the GPU, in any placement.
    #[error("GPU {index} ({uuid}, {model}): {wanted} do not fit together on this GPU (no placement holds them all; see `nvidia-smi mig -lgipp`)")]
    DoesNotFit {
        index: u32,
        uuid: String,
        model: String,
        wanted: String,
    },
    /// MIG wanted on a GPU that cannot do it.
    #[error("GPU {index} ({uuid}, {model}): cannot set MIG mode on non MIG-capable GPU")]
    NotCapable {
        index: u32,
        uuid: String,
        model: String,
    },
    /// A MIG device to be destroyed is in use.
    #[error("GPU {index} ({uuid}): MIG device {device} is in use by {holders}: {fix}")]
    InUse {
        index: u32,
        uuid: String,
        device: String,
        holders: String,
        /// What the admin can do.
        fix: String,
    },
    /// An NVML call failed.
    #[error("GPU {index}: {call} failed: {message}")]
    Nvml {
        index: u32,
        call: &'static str,
        code: u32,
        message: String,
    },
    /// The node layer failed (loading NVML, enumerating GPUs).
    #[error(transparent)]
    Node(#[from] gpuhook_node::NodeError),
    /// No such GPU / instance.
    #[error("{0}")]
    NotFound(String),
}

/// NVML's `NVML_ERROR_IN_USE`.
pub const NVML_ERROR_IN_USE: u32 = 19;
/// NVML's `NVML_ERROR_INSUFFICIENT_RESOURCES`.
pub const NVML_ERROR_INSUFFICIENT_RESOURCES: u32 = 23;
