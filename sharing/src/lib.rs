//! GPU sharing as NVIDIA's k8s-device-plugin (v0.17–v0.20) defines it, in one place.
//!
//! One ConfigMap serves the device plugin and `gpu-mps-daemon`, so both read it here, the same
//! way ([`config`], with NVIDIA's checks in [`kdp`]). A config set is one file or a directory of
//! named configs, the node's chosen by its `nvidia.com/device-plugin.config` label ([`set`]).
//! From a config and a node's inventory this crate computes the [`Advertisement`]: the extended
//! resources, their device IDs (`<uuid>` or `<uuid>::<replica>`) and the node labels ([`labels`]).
//! It is pure data in, data out: no gRPC, no NVML calls, no files written, so a dry run on an
//! admin's laptop gives the same answer as the plugin on the node ([`dryrun`]).

pub mod advertise;
mod build;
pub mod config;
mod devices;
pub mod dryrun;
pub mod error;
mod files;
pub mod host_labels;
pub mod kdp;
pub mod labels;
pub mod model;
pub mod set;

pub use advertise::{
    AdvertiseError, AdvertisedDevice, Advertisement, Backing, DeviceIdStrategy, DeviceListStrategy,
    MigBacking, Resource, SharingKind,
};
pub use build::{
    advertise, advertise_with_warnings, advertised_name, DEFAULT_CDI_ANNOTATION_PREFIX,
};
pub use config::{Config, DeviceId, Devices, MigStrategy, SharingStrategy};
pub use dryrun::{dry_run, DryRun};
pub use error::ConfigError;
pub use labels::nfd_feature_file;
pub use set::{load_config_set, ConfigSet, Fallback, CONFIG_LABEL};
