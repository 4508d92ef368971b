//! Container Device Interface (CDI) for NVIDIA GPUs.
//!
//! CDI is how containerd, CRI-O and podman learn which device nodes, mounts, environment and hooks
//! a device needs, from JSON/YAML spec files in `/etc/cdi` and `/var/run/cdi`. This crate is both
//! sides of that contract:
//! - *producer*: [`generate`] a spec from a discovered [`gpuhook_node::Inventory`] (with the
//!   lowest cdiVersion its contents need, so old runtimes accept it), [`validate_spec`] it against
//!   the official JSON schema and the spec's rules, and [`write_spec`] it atomically;
//! - *consumer*: load spec directories into a [`Registry`] and [`apply_devices`] to an OCI runtime
//!   spec with the same rules the runtimes follow (used by the runtime wrapper).
//!
//! [`edits_for`] is the shared building block: the generator, the prestart hook and the runtime
//! wrapper all describe "these devices with these capabilities" through it.
//!
//! ```no_run
//! # fn demo(inv: &gpuhook_node::Inventory) -> Result<(), gpuhook_cdi::CdiError> {
//! use gpuhook_cdi::*;
//! let spec = generate(inv, &GenerateOptions::new("/usr/bin/gpuhook"))?;
//! let path = std::path::Path::new("/var/run/cdi").join(default_file_name(&spec.kind, Format::Json));
//! write_spec(&spec, &path, Format::Json)?;
//!
//! let registry = Registry::load_default();
//! let mut oci: serde_json::Value = serde_json::from_str("{}").unwrap();
//! apply_devices(&mut oci, &registry, &["nvidia.com/gpu=0".to_string()])?;
//! # Ok(()) }
//! ```

pub mod apply;
pub mod edits;
pub mod error;
pub mod generate;
pub mod modes;
pub mod names;
pub mod nodes;
pub mod registry;
pub mod spec;
pub mod validate;
pub mod version;
pub mod write;

pub use apply::{apply_devices, apply_edits};
pub use edits::{
    common_edits, edits_for, EditOptions, DEFAULT_HOOK_ENV, DISABLE_DEVICE_NODE_MODIFICATION_FLAG,
    GPUHOOK_PROGRAM, SETUP_HOOK,
};
pub use error::CdiError;
pub use generate::{generate, GenerateOptions, NameStrategy, DEFAULT_CLASS, DEFAULT_VENDOR};
pub use modes::{generate_mode, Mode};
pub use names::{qualified_name, NameError, QualifiedName};
pub use nodes::device_nodes;
pub use registry::{
    Conflict, ConflictGroup, Registry, RegistryDevice, RegistryError, DEFAULT_SPEC_DIRS,
};
pub use spec::read_spec_file;
pub use spec::{
    ContainerEdits, Device, DeviceNode, Format, Hook, IntelRdt, Mount, NetDevice, Spec,
};
pub use validate::{load_bytes, validate_bytes, validate_model, validate_spec, ValidationError};
pub use version::minimum_version;
pub use write::{
    default_file_name, is_ours, write_spec, write_spec_replacing, Foreign, WriteOutcome,
};

#[cfg(test)]
pub(crate) mod test_support;
