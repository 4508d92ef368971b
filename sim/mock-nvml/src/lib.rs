//! A mock `libnvidia-ml.so.1` that serves a simulated node through NVML's C ABI.
//!
//! There is no GPU in CI, yet the product (and NVIDIA's own tools it is compared with) query NVML
//! for GPU counts, UUIDs, PCI ids, MIG layouts and compute modes. This cdylib exports the subset of
//! the NVML C API those consumers call, with `nvml.h`'s exact types, layouts and return codes, and
//! answers from the node profile installed next to it (see [`load`]), so NVML agrees with the
//! device nodes and `/proc` files materialised from the same profile.
//!
//! Installed as `<driver-root>/<lib_dir>/libnvidia-ml.so.<ver>` with SONAME `libnvidia-ml.so.1`
//! (set by `build.rs`). Module map: [`ffi`] C types, [`load`] finding the profile, [`table`] the
//! device table and handle validation, [`state`] init refcount and persisted compute mode,
//! `api_*` the exported entry points, [`instances`] the GPU/compute instances and MIG profiles
//! ([`ffi_mig`] their C types), [`events`] event sets and the fault-injection channel.

mod api_device;
mod api_events;
mod api_instances;
mod api_mig;
mod api_mig_write;
mod api_profiles;
mod api_system;
mod api_topology;
mod error;
mod events;
mod ffi;
mod ffi_mig;
mod instances;
mod load;
mod mig_overlay;
mod out;
mod pci;
mod state;
mod table;
