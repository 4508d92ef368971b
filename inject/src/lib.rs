//! gpuhook-inject: safe operations inside a container root.
//!
//! Everything here runs as root on input an image controls (its directory tree, its symlinks, its
//! environment). The crate exists so that the hook, the CDI hook subcommands and `gpuhook system`
//! share one careful implementation of the operations NVIDIA's tooling got wrong in the past:
//! - [`ContainerRoot`]: paths resolved with openat2 `RESOLVE_IN_ROOT|RESOLVE_NO_MAGICLINKS`
//!   (pathrs), bind mounts attached through the resolved fd (CVE-2024-0132, CVE-2025-23359),
//!   symlinks whose location cannot escape the root (CVE-2024-0134); every entry made as the owner
//!   of its directory, so root never writes into a volume a container's user owns (the `owner`
//!   module); [`ContainerRoot::walk_dirs`] follows at most [`MAX_SYMLINKS`] links in all;
//! - [`in_mount_namespace_of`]: a prestart hook's mounts go to the container's mount namespace;
//! - [`start_early_setup`]: the setup hook's links and ldconfig done before the runtime runs;
//! - [`update_ldcache`]: the *host's* ldconfig, sandboxed, with an empty environment, as the owner
//!   of the container's `/etc` (CVE-2024-0136/0137, CVE-2025-23266);
//! - [`cgroup`]: device cgroup v1 (`devices.allow`) and v2 (eBPF program replacement);
//! - [`hooks`]: bodies of the CDI hook subcommands and `/dev/char` links.
//!
//! Minimum kernel: 5.12 (openat2, open_tree/move_mount/mount_setattr).

pub mod cgroup;
mod create;
pub mod cuda_compat;
pub mod early;
pub mod error;
pub mod hooks;
pub mod ldcache;
mod mntns;
mod mountapi;
pub mod oci;
mod openat2;
mod owner;
mod real;
mod root;
mod sandbox;
mod seccomp;
pub mod sys;
mod walk;

#[cfg(test)]
mod fake;

pub use cgroup::{allow_devices, DeviceCgroup, DeviceController, DeviceRule, DeviceType};
pub use early::{start_early_setup, EarlyBind, EarlySetup, PendingSetup};
pub use error::{InjectError, Result};
pub use hooks::{
    create_dev_char_symlinks, create_symlinks, disable_device_node_modification,
    discover_dev_char_nodes, DevCharNode,
};
pub use ldcache::{
    check_ldcache_inputs, start_ldcache_update, update_ldcache, LdcacheOptions, PendingLdcache,
};
pub use mntns::in_mount_namespace_of;
pub use oci::{BundleConfig, OciState};
pub use owner::{Act, Trust};
pub use real::PathrsSyscalls;
pub use root::{
    normalize_container_path, CharDeviceSpec, ContainerRoot, DeviceSource, SymlinkOutcome,
};
pub use sys::{DirFacts, EntryKind, MountOptions, Syscalls};
pub use walk::MAX_SYMLINKS;

#[cfg(test)]
#[path = "root_tests.rs"]
mod root_tests;
