//! gpuhook's MIG manager: NVIDIA mig-parted compatible configs applied per GPU, converging and
//! safe, through NVML loaded from the driver root.
//!
//! # The library API
//!
//! Configs (mig-parted spec `v1`, accepted and refused exactly as mig-parted v0.15.0 does):
//!
//! - [`MigConfigFile::parse`]`(bytes, source_name)` → the named configs; errors name the file,
//!   the config, the entry and the key ([`ConfigError`]).
//! - [`MigConfigFile::config`]`(name)` → its entries ([`MigConfigSpec`]), or "selected
//!   mig-config not present"; [`MigConfigFile::selected_name`] implements `-c` defaulting.
//! - [`MigProfile::parse`] (profile-name grammar, `+me`, `+me.all`, `+gfx`, `-me`),
//!   [`DeviceId`] / [`filter_matches`] (`device-filter` with and without subsystem ids).
//!
//! The node, as plain data ([`GpuState`]: mode, GPU instance profiles with their placements,
//! instances) read by a [`MigBackend`]: [`NvmlBackend`] over gpuhook-node's NVML (loaded from
//! the driver root only); tests use an in-memory backend.
//!
//! Deciding (pure, no NVML):
//!
//! - [`select`]`(entries, &gpus)` → [`Desired`] per covered GPU (mig-parted's entry walk).
//! - [`plan`]`(&gpu, &desired)` → [`GpuPlan`]: a mode change, GPU instances to destroy, keep and
//!   create (with placements, largest first). Empty when the GPU already matches: a re-apply
//!   makes no NVML write call.
//!
//! Doing:
//!
//! - [`apply`]`(&mut backend, entries, &in_use, ApplyOptions)` → [`Outcome`] per GPU
//!   (`Unchanged`, `Changed`, `PendingReset`, `Planned`, `Failed(reason)`). GPUs are changed one
//!   by one and only when they differ; every profile is checked before the first write.
//! - [`assert_applied`]`(&gpus, entries, mode_only)` → what differs (empty: applied).
//! - [`export_yaml`]`(&gpus, label)` → a config that re-applies to the current layout.
//! - For the DRA driver: [`create_instance`]`(&mut backend, gpu, "1g.10gb", Some(start))` →
//!   [`CreatedDevice`] (GPU/compute instance ids, placement, MIG UUID) and
//!   [`destroy_instance`]`(&mut backend, gpu, gi, &in_use, drain)`.
//! - [`InUse`]: who holds a MIG device or a GPU ([`Holder`]: NVML's running processes, the
//!   kubelet's pod-resources allocations, the MPS daemon's clients), as a [`DeviceHolders`]
//!   snapshot: the CLI fills it from NVML ([`NvmlBackend::device_processes`]), the Kubernetes
//!   agent from all three. A held device is not destroyed (nor its GPU's mode changed) unless
//!   the caller drains. NVML's own `IN_USE` refusal is always honoured.
//!
//! The `gpuhook-mig-parted` binary (also callable as `nvidia-mig-parted`) is a thin `main` over
//! [`cli`].

mod apply;
mod assertion;
pub mod cli;
mod device_id;
mod error;
mod export;
mod holders;
mod instance;
mod nvml_backend;
mod nvml_holders;
mod pack;
mod plan;
mod profile;
mod select;
mod spec;
mod state;

pub use apply::{apply, ApplyOptions, GpuOutcome, GpuStatus, MigBackend, Outcome};
pub use assertion::assert_applied;
pub use device_id::{filter_matches, DeviceId, DeviceIdError};
pub use error::{MigError, NVML_ERROR_INSUFFICIENT_RESOURCES, NVML_ERROR_IN_USE};
pub use export::export_yaml;
pub use holders::{
    describe as describe_holders, device_id_uuid, DeviceHolders, Holder, InUse, NoHolders,
};
pub use instance::{create_instance, destroy_instance, CreatedDevice};
pub use nvml_backend::NvmlBackend;
pub use pack::{pack, Item};
pub use plan::{plan, GpuPlan, NewInstance};
pub use profile::{MigProfile, ProfileNameError};
pub use select::{entry_matches, select, Desired};
pub use spec::{
    parse_entry_document, ConfigError, Devices, MigConfigFile, MigConfigSpec, MAX_CONFIG_BYTES,
};
pub use state::{
    ci_profile_id, ComputeInstance, GiProfileInfo, GpuInstance, GpuState, MigMode, Placement,
};

#[cfg(test)]
pub(crate) mod test_support;

#[cfg(test)]
#[path = "operator_tests.rs"]
mod operator_tests;
