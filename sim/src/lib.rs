//! Simulated NVIDIA GPU nodes.
//!
//! CI and developer machines have no GPU, so every test runs against a *simulated node*: a driver
//! root materialised from a [`profile::NodeProfile`] with real character device nodes, `/proc`
//! files, ELF stub libraries and an `ld.so.cache` made by the real `ldconfig`, plus a mock
//! `libnvidia-ml.so.1`. The product never knows: it is pointed at the driver root like at a real one.

pub mod builtin;
pub mod elf;
pub mod elf32;
pub mod library_table;
pub mod load;
pub mod materialise;
pub mod mig_catalog;
pub mod mig_state;
pub mod profile;
pub mod smi;
pub mod validate;

pub use load::{builtin_names, ProfileError};
pub use materialise::{materialise, MaterialiseOptions, Report, SimError};
pub use profile::NodeProfile;
