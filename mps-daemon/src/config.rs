//! The configuration file: the k8s-device-plugin sharing format plus our `mpsDaemon` section.
//!
//! Operators already write `sharing.mps` for NVIDIA's device plugin, so we read that exact shape
//! (`version: v1`, `sharing.mps.resources[]`) and keep our own settings in a separate top-level
//! `mpsDaemon` key that the plugin does not know about. The device-plugin part is checked the way
//! NVIDIA's plugin checks it ([`crate::kdp`]: unknown keys there are warnings, as the plugin
//! ignores them; what it refuses, we refuse). Unknown keys in `mpsDaemon` are errors with their
//! full path, because a typo there silently changes how the daemon runs.
//!
//! This module only parses; [`crate::plan`] checks the values against the node's GPUs.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::Deserialize;

/// Default MPS root: pipe, log and shm directories per GPU live under it.
pub const DEFAULT_MPS_ROOT: &str = "/run/gpuhook/mps";

/// Errors reading or parsing a configuration file.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("config file {path}: {key}: {message}")]
    Parse {
        path: PathBuf,
        key: String,
        message: String,
    },
    /// A value that parsed but makes no sense (names the key and the fix).
    #[error("{key}: {message}")]
    Invalid { key: String, message: String },
}

impl ConfigError {
    /// Key and message are capped: parsers quote the (ConfigMap author's) value whole.
    pub(crate) fn invalid(key: impl Into<String>, message: impl Into<String>) -> Self {
        use gpuhook_node::bounded::{cap_message, preview};
        ConfigError::Invalid {
            key: preview(&key.into()),
            message: cap_message(&message.into()),
        }
    }
}

/// The whole file.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigFile {
    /// `v1`; omitted means `v1`, as for NVIDIA's plugin.
    #[serde(default)]
    pub version: Option<String>,
    /// Keys NVIDIA's plugin ignores (named, to be shown as warnings).
    #[serde(skip)]
    pub warnings: Vec<String>,
    /// Device-plugin keys we accept so that one file can serve both programs; ignored here.
    #[serde(default)]
    pub flags: Option<yaml_serde::Value>,
    #[serde(default)]
    pub resources: Option<yaml_serde::Value>,
    #[serde(default)]
    pub imex: Option<yaml_serde::Value>,
    #[serde(default)]
    pub sharing: Sharing,
    /// Our own settings.
    #[serde(default)]
    pub mps_daemon: DaemonSection,
}

/// `sharing`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Sharing {
    /// Same shape as `mps`, used by the device plugin only.
    #[serde(default)]
    pub time_slicing: Option<yaml_serde::Value>,
    #[serde(default)]
    pub mps: Option<MpsSharing>,
}

/// `sharing.mps`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MpsSharing {
    #[serde(default)]
    pub rename_by_default: bool,
    #[serde(default)]
    pub fail_requests_greater_than_one: bool,
    #[serde(default)]
    pub resources: Vec<Resource>,
}

/// `sharing.mps.resources[]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Resource {
    pub name: String,
    #[serde(default)]
    pub rename: Option<String>,
    pub replicas: i64,
    #[serde(default)]
    pub devices: Devices,
}

/// `devices`: `all`, a count, or a list of indexes / UUIDs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Devices {
    #[default]
    All,
    Count(i64),
    List(Vec<DeviceId>),
}

/// One entry of a device list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceId {
    Index(u32),
    Uuid(String),
}

impl fmt::Display for DeviceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceId::Index(i) => write!(f, "{i}"),
            DeviceId::Uuid(u) => f.write_str(u),
        }
    }
}

/// `mpsDaemon`: settings of gpu-mps-daemon itself (not part of the device-plugin format).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DaemonSection {
    /// Default `/run/gpuhook/mps`.
    pub mps_root: Option<PathBuf>,
    /// Default `/`.
    pub driver_root: Option<PathBuf>,
    /// Host path of the control binary; default `<driverRoot>/usr/bin/nvidia-cuda-mps-control`.
    pub control_binary: Option<PathBuf>,
    /// Size of a tmpfs shared as `/dev/shm` by the daemon and its clients (`1Gi`, `512M`, bytes).
    pub shm_size: Option<ByteSize>,
    /// Health-probe period (`5s`, `500ms`); default 5s.
    pub probe_interval: Option<DurationValue>,
    /// Bound on every control command (`get_server_list`, `set_*`); default 5s.
    pub command_timeout: Option<DurationValue>,
    /// Bound on `-d` start until the control socket answers; default 10s.
    pub start_timeout: Option<DurationValue>,
    /// Bound on `quit` at shutdown before the daemon is killed; default 10s.
    pub shutdown_timeout: Option<DurationValue>,
    /// Upper bound of the exponential restart backoff; default 30s.
    pub max_restart_backoff: Option<DurationValue>,
    /// Per-GPU overrides of the limits derived from `replicas`.
    #[serde(default)]
    pub gpus: Vec<GpuOverride>,
    /// Fractional shares offered on every MPS GPU besides the default 1/replicas one (CDI
    /// devices `<index>-<name>` and `<uuid>-<name>`).
    #[serde(default)]
    pub shares: Vec<ShareConfig>,
    /// Directory of our CDI spec (`nvidia.com-gpu-mps.json`); default `/var/run/cdi`.
    pub cdi_spec_dir: Option<PathBuf>,
    /// The driver root as the container runtime reading the CDI spec sees it (when this daemon
    /// runs in a container with the host's driver root mounted elsewhere); default `driverRoot`.
    pub host_driver_root: Option<PathBuf>,
    /// Host path of the `gpuhook` binary that the CDI spec's hooks run; default `/usr/bin/gpuhook`.
    pub gpuhook_path: Option<PathBuf>,
    /// Where containers see the GPU's pipe directory; default `/tmp/nvidia-mps` (CUDA's default).
    pub container_pipe_directory: Option<PathBuf>,
    /// At most this many MPS clients per container and GPU; the newest beyond it are terminated.
    pub max_clients_per_container: Option<i64>,
    /// Where the host's `/proc` is (clients are mapped to containers through it); default `/proc`.
    pub proc_root: Option<PathBuf>,
    /// Where the host's cgroup file systems are mounted; default `/sys/fs/cgroup`.
    pub cgroup_root: Option<PathBuf>,
}

/// `mpsDaemon.shares[]`: a named fraction of a GPU.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ShareConfig {
    pub name: String,
    /// `1/4`, `0.25` or `25%`.
    pub fraction: FractionValue,
}

/// A fraction written as `1/4`, `0.25` or `25%`, kept exact as numerator / denominator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FractionValue {
    pub num: u64,
    pub den: u64,
}

/// `mpsDaemon.gpus[]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GpuOverride {
    pub device: DeviceId,
    pub active_thread_percentage: Option<i64>,
    #[serde(rename = "pinnedMemoryLimitMiB")]
    pub pinned_memory_limit_mib: Option<i64>,
}

/// A size in bytes, written as `1Gi`, `512Mi`, `1G`, `64M` or a plain number of bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteSize(pub u64);

/// A duration written as `5s`, `250ms`, `1m` or a plain number of seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurationValue(pub Duration);

/// Reads and parses `path` (no checks against the node; see [`crate::plan::resolve`]).
pub fn load(path: &Path) -> Result<ConfigFile, ConfigError> {
    let read_err = |source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    };
    // Symlinks followed: a ConfigMap mount's files are symlinks (the file is the admin's).
    let bytes = crate::safefs::read_regular(path, MAX_CONFIG_BYTES, true).map_err(read_err)?;
    let text = String::from_utf8(bytes).map_err(|e| {
        read_err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("not UTF-8 text ({e})"),
        ))
    })?;
    parse(&text).map_err(|e| match e {
        ConfigError::Invalid { key, message } => ConfigError::Parse {
            path: path.to_path_buf(),
            key,
            message,
        },
        other => other,
    })
}

/// Largest config file read (NVIDIA's configs are a few KiB; a ConfigMap is at most 1 MiB).
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Parses YAML text; errors name the key path (`sharing.mps.resources[0].replicas`).
pub fn parse(text: &str) -> Result<ConfigFile, ConfigError> {
    // An empty file is a valid (empty) config for NVIDIA's plugin.
    let doc: yaml_serde::Value = if text.trim().is_empty() {
        yaml_serde::Value::Null
    } else {
        yaml_serde::from_str(text)
            .map_err(|e| ConfigError::invalid("(top level)", e.to_string()))?
    };
    let warnings = crate::kdp::check(&doc)?;
    let doc = match doc {
        yaml_serde::Value::Null => yaml_serde::Value::Mapping(Default::default()),
        d => d,
    };
    let mut cfg: ConfigFile = serde_path_to_error::deserialize(doc).map_err(|e| {
        let key = match e.path().to_string() {
            p if p == "." || p.is_empty() => "(top level)".to_string(),
            p => p,
        };
        ConfigError::invalid(key, e.into_inner().to_string())
    })?;
    cfg.warnings = warnings;
    Ok(cfg)
}

/// Parses `1Gi`, `512Mi`, `1G`, `64M`, `4096K`, `123` (bytes).
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().ok()?;
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "K" | "k" | "KB" | "Ki" | "KiB" => 1 << 10,
        "M" | "MB" | "Mi" | "MiB" => 1 << 20,
        "G" | "GB" | "Gi" | "GiB" => 1 << 30,
        "T" | "TB" | "Ti" | "TiB" => 1 << 40,
        _ => return None,
    };
    n.checked_mul(mult)
}

/// Parses `250ms`, `5s`, `2m`, `1h` or a plain number of seconds.
pub fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().ok()?;
    match unit.trim() {
        "ms" => Some(Duration::from_millis(n)),
        "" | "s" => Some(Duration::from_secs(n)),
        "m" => n.checked_mul(60).map(Duration::from_secs),
        "h" => n.checked_mul(3600).map(Duration::from_secs),
        _ => None,
    }
}

impl<'de> Deserialize<'de> for Devices {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Devices;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("`all`, a number of GPUs, or a list of GPU indexes / UUIDs")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Devices, E> {
                if v == "all" {
                    Ok(Devices::All)
                } else {
                    Err(E::custom(format!(
                        "expected `all`, a number of GPUs, or a list of GPU indexes / UUIDs, got {v:?}"
                    )))
                }
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Devices, E> {
                Ok(Devices::Count(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Devices, E> {
                Ok(Devices::Count(i64::try_from(v).unwrap_or(i64::MAX)))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Devices, E> {
                // YAML -> JSON makes 2.0 the count 2 for NVIDIA's plugin; 2.5 is no count.
                if v.fract() == 0.0 && (1.0..=1e6).contains(&v) {
                    format!("{v:.0}")
                        .parse()
                        .map(Devices::Count)
                        .map_err(E::custom)
                } else {
                    Err(E::custom(format!(
                        "a count of devices must be a whole number > 0, got {v}"
                    )))
                }
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Devices, A::Error> {
                let mut out = Vec::new();
                while let Some(id) = seq.next_element::<DeviceId>()? {
                    out.push(id);
                }
                Ok(Devices::List(out))
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for DeviceId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = DeviceId;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a GPU index or a GPU UUID")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<DeviceId, E> {
                u32::try_from(v)
                    .map(DeviceId::Index)
                    .map_err(|_| E::custom(format!("GPU index {v} is out of range")))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<DeviceId, E> {
                u32::try_from(v)
                    .map(DeviceId::Index)
                    .map_err(|_| E::custom(format!("GPU index {v} is out of range")))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<DeviceId, E> {
                match v.parse::<u32>() {
                    Ok(i) => Ok(DeviceId::Index(i)),
                    Err(_) if !v.trim().is_empty() => Ok(DeviceId::Uuid(v.trim().to_string())),
                    Err(_) => Err(E::custom("empty device id")),
                }
            }
        }
        d.deserialize_any(V)
    }
}

macro_rules! string_value {
    ($ty:ident, $parse:path, $wrap:expr, $what:literal) => {
        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let v = yaml_serde::Value::deserialize(d)?;
                let text = match &v {
                    yaml_serde::Value::String(s) => s.clone(),
                    yaml_serde::Value::Number(n) => n.to_string(),
                    _ => String::new(),
                };
                $parse(&text).map($wrap).ok_or_else(|| {
                    de::Error::custom(format!(concat!("invalid ", $what, " {:?}"), text))
                })
            }
        }
    };
}

string_value!(
    ByteSize,
    parse_size,
    ByteSize,
    "size (use e.g. `1Gi`, `512Mi`, `64M`)"
);
string_value!(
    FractionValue,
    crate::settings::parse_fraction,
    |(num, den)| FractionValue { num, den },
    "fraction (use e.g. `1/4`, `0.5` or `25%`)"
);
string_value!(
    DurationValue,
    parse_duration,
    DurationValue,
    "duration (use e.g. `5s`, `250ms`, `1m`)"
);

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
