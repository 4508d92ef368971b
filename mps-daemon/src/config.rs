//! The configuration file: the k8s-device-plugin sharing format plus our `mpsDaemon` section.
//!
//! Operators already write `sharing.mps` for NVIDIA's device plugin, so we read that exact shape
//! (`version: v1`, `sharing.mps.resources[]`) and keep our own settings in a separate top-level
//! `mpsDaemon` key that the plugin does not know about. The device-plugin part is read by
//! `gpuhook-sharing`, the same code the device plugin reads it with (NVIDIA's checks: unknown keys
//! there are warnings, as the plugin ignores them; what it refuses, we refuse). Unknown keys in
//! `mpsDaemon` are errors with their full path, because a typo there silently changes how the
//! daemon runs.
//!
//! This module only parses; [`crate::plan`] checks the values against the node's GPUs.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::{self, Deserializer};
use serde::Deserialize;

/// Default MPS root: pipe, log and shm directories per GPU live under it.
pub const DEFAULT_MPS_ROOT: &str = "/run/gpuhook/mps";

pub use gpuhook_sharing::config::{
    DeviceId, Devices, ReplicatedResource as Resource, ReplicatedResources as MpsSharing, Sharing,
    MAX_CONFIG_BYTES,
};
/// Errors reading or parsing a configuration file (shared with the device plugin).
pub use gpuhook_sharing::ConfigError;

/// The whole file.
#[derive(Debug, Clone)]
pub struct ConfigFile {
    /// `v1`; omitted means `v1`, as for NVIDIA's plugin.
    pub version: Option<String>,
    /// Keys NVIDIA's plugin ignores (named, to be shown as warnings).
    pub warnings: Vec<String>,
    /// `sharing` as NVIDIA's plugin reads it (with its defaults applied).
    pub sharing: Sharing,
    /// Our own settings.
    pub mps_daemon: DaemonSection,
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
    /// CRI runtime socket that names the pod, namespace and container of each client's
    /// container (`--cri-socket` wins); off by default. Read at start, not on SIGHUP.
    pub cri_socket: Option<PathBuf>,
    /// The one user id every MPS client of these GPUs runs as (the control daemon serves one
    /// user at a time); published in each GPU's `ready` file, where gpuhook's runtime wrapper
    /// and prestart hook refuse a container of another user. Off by default.
    pub client_user: Option<u32>,
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
    // Symlinks followed: a ConfigMap mount's files are symlinks (the file is the admin's).
    let doc = gpuhook_sharing::config::read_document(path)?;
    from_document(doc).map_err(|e| e.in_file(path))
}

/// Parses YAML text; errors name the key path (`sharing.mps.resources[0].replicas`).
pub fn parse(text: &str) -> Result<ConfigFile, ConfigError> {
    from_document(gpuhook_sharing::config::parse_document(text)?)
}

/// The device-plugin part as `gpuhook-sharing` reads it, then our `mpsDaemon` section.
fn from_document(doc: yaml_serde::Value) -> Result<ConfigFile, ConfigError> {
    let kdp = gpuhook_sharing::config::from_document(&doc)?;
    let section = match &doc {
        yaml_serde::Value::Mapping(m) => m.get("mpsDaemon").cloned(),
        _ => None,
    };
    let mps_daemon = match section.filter(|v| !v.is_null()) {
        None => DaemonSection::default(),
        Some(v) => serde_path_to_error::deserialize(v).map_err(|e| {
            let path = e.path().to_string();
            let key = if path == "." || path.is_empty() {
                "mpsDaemon".to_string()
            } else {
                format!("mpsDaemon.{path}")
            };
            ConfigError::invalid(key, e.into_inner().to_string())
        })?,
    };
    Ok(ConfigFile {
        version: kdp.version,
        warnings: kdp.warnings,
        sharing: kdp.sharing,
        mps_daemon,
    })
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
