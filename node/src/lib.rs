//! Node discovery for gpuhook.
//!
//! Both `gpuhook` (CDI generation, prestart hook, runtime wrapper) and `gpu-mps-daemon` need the
//! same facts about a node: which GPUs and MIG devices exist, their device numbers, and which
//! driver files belong to which capability. This crate finds them under a *driver root* (default
//! `/`) without assuming anything about where that root came from, so the same code runs against a
//! real driver and against a simulated node.

pub mod inventory;

pub use inventory::*;
