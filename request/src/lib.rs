//! What a container asks for, parsed from its (untrusted) OCI `config.json`.
//!
//! The prestart hook and the runtime wrapper run as root with input chosen by the image author, so
//! this crate is strict (every malformed value is an error that names it), bounded (see
//! [`limits`]) and side-effect free: reading ([`ContainerRequest::read`], once per container)
//! needs no discovery, resolution ([`GpuRequest::resolve`]) needs only an
//! [`gpuhook_node::Inventory`]. An error means nothing is injected.
//!
//! Every entry point reads requests through this crate (the prestart hook, the runtime wrapper,
//! `gpuhook doctor`, the device plugin), so it stays free of heavy dependencies. On the start
//! path, [`is_gpu_container`] (and, for the wrapper, [`has_cdi_request`]) decide without
//! allocating whether there is anything to read at all.
//!
//! Sources, first one that yields something wins ([`RequestSource`]): `cdi.k8s.io/*` annotations
//! (a pod's own only for allow-listed devices: [`provenance`]),
//! then `/var/run/nvidia-container-devices/` mounts (if enabled), then `NVIDIA_VISIBLE_DEVICES`
//! (from an unprivileged container only if allowed), then the legacy-image default.

mod capabilities;
mod cdi_name;
mod container;
mod devices;
mod error;
mod extras;
mod gpu;
pub mod limits;
mod mps_access;
mod mps_check;
mod oci;
mod parse;
mod policy;
mod precheck;
pub mod provenance;
mod require;
mod require_eval;
mod resolve;
#[cfg(test)]
mod test_support;

pub use gpuhook_node::Capability;

pub use capabilities::{parse_capabilities, parse_capability, DEFAULT_CAPABILITIES};
pub use cdi_name::{
    validate_class, validate_device_name, validate_vendor, QualifiedName, NVIDIA_GPU_KIND,
    NVIDIA_GPU_MPS_KIND,
};
pub use container::{mps_cdi_names, parse, ContainerRequest};
pub use devices::{normalize_pci_bus_id, parse_id, DeviceId, DeviceSelection};
pub use error::{RequestError, RequestSource, SyntaxError};
pub use extras::{
    check_feature_gates, parse_imex_channels, parse_mig_access, parse_mps_pipe_dir, ImexChannels,
    FEATURE_GATES,
};
pub use gpu::{GpuRequest, NotGpuReason, ParseOutcome, ResolvedRequest};
pub use mps_access::{mps_shares, MpsAccessError, MpsShare, ProcessUser};
pub use mps_check::check_mps_access;
pub use oci::{CDI_ANNOTATION_PREFIX, DEVICE_LIST_MOUNT_ROOT};
pub use policy::RequestPolicy;
pub use precheck::{has_cdi_request, is_gpu_container};
pub use provenance::glob_match;
pub use require::{
    compare_versions, is_truthy, legacy_cuda_constraint, parse_expression, parse_version,
    Constraint, Factor, Op, Property, Requirements, Term, Value as RequirementValue,
};
pub use require_eval::RequirementReport;
pub use resolve::{all_devices, resolve_id, resolve_selection, ResolvedDevices};

#[cfg(test)]
mod tests;
