//! NVIDIA's device-plugin config file (`version: v1`), read into types.
//!
//! The raw YAML is first checked the way NVIDIA's plugin checks it ([`crate::kdp::check`]: what
//! it refuses we refuse, with the key; keys it ignores are warnings naming them), then read into
//! [`Config`] with the defaults NVIDIA applies at parse time (`api/config/v1/config.go:NewConfig`,
//! `replicas.go:ReplicatedResources.UnmarshalJSON`): MPS's `failRequestsGreaterThanOne` is true
//! unless set, and `renameByDefault` fills an empty `rename` with `<name>.shared`. Keys this type
//! does not know (gpu-mps-daemon's `mpsDaemon` section) are left to their reader.

use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::advertise::{DeviceIdStrategy, DeviceListStrategy};
use crate::error::ConfigError;

pub use crate::devices::{DeviceId, Devices};

/// Largest config file read (NVIDIA's configs are a few KiB; a ConfigMap is at most 1 MiB).
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// One device-plugin config: what one node runs with.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Config {
    /// `v1`; omitted means `v1` (`parseConfigFrom`).
    #[serde(default)]
    pub version: Option<String>,
    #[serde(default)]
    pub flags: Flags,
    #[serde(default)]
    pub sharing: Sharing,
    /// `resources` (custom resource names): NVIDIA's running plugin discards it with a warning
    /// (`DisableResourceNamingInConfig`), and so do we.
    #[serde(default, skip_serializing)]
    pub resources: Option<yaml_serde::Value>,
    /// Keys NVIDIA's plugin ignores, named (shown as warnings).
    #[serde(skip)]
    pub warnings: Vec<String>,
}

/// `flags`: the plugin's command-line flags, settable in the file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Flags {
    #[serde(default)]
    pub mig_strategy: Option<MigStrategy>,
    #[serde(default)]
    pub fail_on_init_error: Option<bool>,
    #[serde(default)]
    pub mps_root: Option<String>,
    #[serde(default)]
    pub nvidia_driver_root: Option<String>,
    #[serde(default)]
    pub nvidia_dev_root: Option<String>,
    #[serde(default)]
    pub plugin: PluginFlags,
    #[serde(default)]
    pub gfd: GfdFlags,
}

/// `flags.gfd`: GPU feature discovery's flags; only `noTimestamp` changes our labels.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GfdFlags {
    /// Leave out the `nvidia.com/gfd.timestamp` label (NVIDIA
    /// `internal/lm/timestamp.go:NewTimestampLabeler`).
    #[serde(default)]
    pub no_timestamp: Option<bool>,
}

/// `flags.plugin`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PluginFlags {
    #[serde(default)]
    pub pass_device_specs: Option<bool>,
    /// A string or a list of strings in the file.
    #[serde(default, deserialize_with = "one_or_many")]
    pub device_list_strategy: Option<Vec<DeviceListStrategy>>,
    #[serde(default, rename = "deviceIDStrategy")]
    pub device_id_strategy: Option<DeviceIdStrategy>,
    #[serde(default)]
    pub cdi_annotation_prefix: Option<String>,
    #[serde(default)]
    pub shared_devices_allocation_policy: Option<AllocationPolicy>,
}

/// `flags.migStrategy`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MigStrategy {
    #[default]
    None,
    Single,
    Mixed,
}

/// `flags.plugin.sharedDevicesAllocationPolicy`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AllocationPolicy {
    #[default]
    Distributed,
    Packed,
}

/// `sharing`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", from = "RawSharing")]
pub struct Sharing {
    pub time_slicing: Option<ReplicatedResources>,
    pub mps: Option<ReplicatedResources>,
}

/// `sharing.timeSlicing` / `sharing.mps`, with NVIDIA's parse-time defaults applied.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplicatedResources {
    pub rename_by_default: bool,
    /// Unset: true for MPS (`NewConfig`), false for time-slicing.
    pub fail_requests_greater_than_one: bool,
    pub resources: Vec<ReplicatedResource>,
}

/// One `resources[]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplicatedResource {
    /// As written (`gpu` or `nvidia.com/gpu`); [`ReplicatedResource::full_name`] adds the prefix.
    pub name: String,
    #[serde(default)]
    pub rename: Option<String>,
    pub replicas: i64,
    #[serde(default)]
    pub devices: Devices,
}

/// How the node's devices are shared (`sharing.go:SharingStrategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SharingStrategy {
    None,
    TimeSlicing,
    Mps,
}

impl fmt::Display for SharingStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SharingStrategy::None => "none",
            SharingStrategy::TimeSlicing => "time-slicing",
            SharingStrategy::Mps => "mps",
        })
    }
}

/// `nvidia.com/` + `name` unless it has a prefix already (`resources.go:NewResourceName`).
pub fn full_resource_name(name: &str) -> String {
    if name.starts_with("nvidia.com/") {
        name.to_string()
    } else {
        format!("nvidia.com/{name}")
    }
}

impl ReplicatedResource {
    /// The resource name with its `nvidia.com/` prefix.
    pub fn full_name(&self) -> String {
        full_resource_name(&self.name)
    }
}

impl Sharing {
    /// `SharingStrategy()`: mps when an MPS resource has replicas > 1, else time-slicing when a
    /// time-slicing one has, else none.
    pub fn strategy(&self) -> SharingStrategy {
        let replicated = |s: &Option<ReplicatedResources>| {
            s.as_ref()
                .is_some_and(|s| s.resources.iter().any(|r| r.replicas > 1))
        };
        if replicated(&self.mps) {
            SharingStrategy::Mps
        } else if replicated(&self.time_slicing) {
            SharingStrategy::TimeSlicing
        } else {
            SharingStrategy::None
        }
    }

    /// `ReplicatedResources()`: MPS whenever the section exists (a time-slicing section beside it
    /// is ignored, as NVIDIA ignores it), else time-slicing.
    pub fn replicated(&self) -> Option<(&ReplicatedResources, bool)> {
        match (&self.mps, &self.time_slicing) {
            (Some(m), _) => Some((m, true)),
            (None, Some(t)) => Some((t, false)),
            (None, None) => None,
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawSharing {
    #[serde(default)]
    time_slicing: Option<RawSection>,
    #[serde(default)]
    mps: Option<RawSection>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawSection {
    #[serde(default)]
    rename_by_default: bool,
    #[serde(default)]
    fail_requests_greater_than_one: Option<bool>,
    #[serde(default)]
    resources: Vec<ReplicatedResource>,
}

impl RawSection {
    fn apply_defaults(self, mps: bool) -> ReplicatedResources {
        let rename_by_default = self.rename_by_default;
        let resources = self
            .resources
            .into_iter()
            .map(|mut r| {
                if rename_by_default && r.rename.as_deref().unwrap_or("").is_empty() {
                    r.rename = Some(format!("{}.shared", r.full_name()));
                }
                r
            })
            .collect();
        ReplicatedResources {
            rename_by_default,
            fail_requests_greater_than_one: self.fail_requests_greater_than_one.unwrap_or(mps),
            resources,
        }
    }
}

impl From<RawSharing> for Sharing {
    fn from(r: RawSharing) -> Self {
        Sharing {
            time_slicing: r.time_slicing.map(|s| s.apply_defaults(false)),
            mps: r.mps.map(|s| s.apply_defaults(true)),
        }
    }
}

fn one_or_many<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<Vec<DeviceListStrategy>>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(DeviceListStrategy),
        Many(Vec<DeviceListStrategy>),
    }
    Ok(Option::<OneOrMany>::deserialize(d)?.map(|v| match v {
        OneOrMany::One(s) => vec![s],
        OneOrMany::Many(v) => v,
    }))
}

/// Reads the YAML document of `path` (a ConfigMap file: symlinks followed, size bounded, never
/// blocking on a FIFO). An empty file is the empty document, as for NVIDIA's plugin.
pub fn read_document(path: &Path) -> Result<yaml_serde::Value, ConfigError> {
    let text = crate::files::read_text(path, MAX_CONFIG_BYTES)?;
    parse_document(&text).map_err(|e| e.in_file(path))
}

/// Parses YAML text into a document (empty text: the empty document).
pub fn parse_document(text: &str) -> Result<yaml_serde::Value, ConfigError> {
    if text.trim().is_empty() {
        return Ok(yaml_serde::Value::Null);
    }
    yaml_serde::from_str(text).map_err(|e| ConfigError::invalid("(top level)", e.to_string()))
}

/// Checks and reads a document as NVIDIA's plugin does; errors name the key path.
pub fn from_document(doc: &yaml_serde::Value) -> Result<Config, ConfigError> {
    let warnings = crate::kdp::check(doc)?;
    let doc = match doc {
        yaml_serde::Value::Null => yaml_serde::Value::Mapping(Default::default()),
        d => d.clone(),
    };
    let mut cfg: Config = serde_path_to_error::deserialize(doc).map_err(|e| {
        let key = match e.path().to_string() {
            p if p == "." || p.is_empty() => "(top level)".to_string(),
            p => p,
        };
        ConfigError::invalid(key, e.into_inner().to_string())
    })?;
    cfg.warnings = warnings;
    Ok(cfg)
}

/// Parses YAML text (errors name the key path: `sharing.mps.resources[0].replicas`).
pub fn parse(text: &str) -> Result<Config, ConfigError> {
    from_document(&parse_document(text)?)
}

/// Reads and parses the config file `path` (errors name the file too).
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    from_document(&read_document(path)?).map_err(|e| e.in_file(path))
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
