//! GPU sharing as NVIDIA's k8s-device-plugin (v0.17–v0.20) defines it, in one place.
//!
//! One ConfigMap serves the device plugin and `gpu-mps-daemon`, so both read it here, the same
//! way. From a config and a node's inventory this crate computes the [`Advertisement`]: the
//! extended resources, their device IDs (`<uuid>` or `<uuid>::<replica>`) and the node labels.
//! It is pure data in, data out: no gRPC, no NVML calls, no files written, so a dry run on an
//! admin's laptop gives the same answer as the plugin on the node.

pub mod advertise;

pub use advertise::{
    AdvertisedDevice, Advertisement, Backing, DeviceIdStrategy, DeviceListStrategy, MigBacking,
    Resource, SharingKind,
};
