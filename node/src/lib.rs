//! Node discovery for gpuhook.
//!
//! Both `gpuhook` (CDI generation, prestart hook, runtime wrapper) and `gpu-mps-daemon` need the
//! same facts about a node: which GPUs and MIG devices exist, their device numbers, and which
//! driver files belong to which capability. This crate finds them under a *driver root* (default
//! `/`) without assuming anything about where that root came from, so the same code runs against a
//! real driver and against a simulated node.

pub mod bounded;
pub mod cache;
pub mod devnodes;
pub mod discover;
pub mod error;
pub mod extras;
pub mod files;
pub mod fingerprint;
pub mod gpus;
pub mod inventory;
pub mod ldcache;
pub mod library_names;
pub mod nvml;
pub mod procfs;
pub mod rootfs;
pub mod topology;

#[cfg(test)]
mod testutil;

pub use cache::{load_fresh, node_driver_version, Staleness};
pub use devnodes::DevNode;
pub use discover::{discover, DiscoverOptions, Discovery};
pub use error::NodeError;
pub use inventory::*;
pub use nvml::{ComputeMode, Nvml, NvmlLocation};
