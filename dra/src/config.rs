//! NVIDIA's opaque device config (`resource.nvidia.com/v1beta1` `GpuConfig`/`MigDeviceConfig`),
//! decoded strictly (unknown fields are errors, as NVIDIA's `StrictDecoder`), validated, and
//! resolved per allocated device the way NVIDIA's `prepareDevices` does (dra-facts §5).

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use crate::quantity::parse_bytes;

/// The only `apiVersion` of NVIDIA's config types.
pub const API_VERSION: &str = "resource.nvidia.com/v1beta1";
/// Smallest pinned-memory limit NVIDIA accepts (1 MiB).
pub const MIN_MEMORY_LIMIT: u64 = 1 << 20;

/// Why a config is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("opaque config: apiVersion {0:?} is not supported (use {API_VERSION})")]
    Version(String),
    #[error("opaque config: kind {0:?} is not supported (use GpuConfig or MigDeviceConfig)")]
    Kind(String),
    #[error("opaque config {kind}: {message}")]
    Decode { kind: String, message: String },
    #[error("opaque config: unknown GPU sharing strategy {0:?} (TimeSlicing or MPS)")]
    Strategy(String),
    #[error("opaque config: unknown time-slice interval {0:?} (Default, Short, Medium or Long)")]
    Interval(String),
    #[error("opaque config: cannot use {sub} with the '{strategy}' strategy")]
    Mismatch {
        sub: &'static str,
        strategy: &'static str,
    },
    #[error("opaque config: {0:?} is selected as the GPU sharing strategy, but it is disabled on this node (start the plugin with --sharing={1})")]
    Disabled(&'static str, &'static str),
    #[error("opaque config: mpsConfig.defaultActiveThreadPercentage {0} is outside 0..100")]
    ThreadPercentage(i64),
    #[error("opaque config: mpsConfig.{key}: {message}")]
    Limit { key: String, message: String },
    #[error("cannot apply {kind} to device {device} of request {request:?} (it is a {actual})")]
    WrongKind {
        kind: &'static str,
        device: String,
        request: String,
        actual: &'static str,
    },
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct GpuConfigDoc {
    #[allow(dead_code)]
    api_version: String,
    #[allow(dead_code)]
    kind: String,
    #[serde(default)]
    sharing: Option<GpuSharingDoc>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct GpuSharingDoc {
    strategy: String,
    #[serde(default)]
    time_slicing_config: Option<TimeSlicingDoc>,
    #[serde(default)]
    mps_config: Option<MpsDoc>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct MigConfigDoc {
    #[allow(dead_code)]
    api_version: String,
    #[allow(dead_code)]
    kind: String,
    #[serde(default)]
    sharing: Option<MigSharingDoc>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct MigSharingDoc {
    strategy: String,
    #[serde(default)]
    mps_config: Option<MpsDoc>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TimeSlicingDoc {
    #[serde(default)]
    interval: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct MpsDoc {
    #[serde(default)]
    default_active_thread_percentage: Option<i64>,
    #[serde(default)]
    default_pinned_device_memory_limit: Option<Value>,
    #[serde(default)]
    default_per_device_pinned_memory_limit: Option<BTreeMap<String, Value>>,
}

/// NVIDIA's time-slice intervals, in `nvidia-smi compute-policy --set-timeslice` numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Interval {
    Default = 0,
    Short = 1,
    Medium = 2,
    Long = 3,
}

impl Interval {
    pub fn parse(s: &str) -> Result<Self, ConfigError> {
        Ok(match s {
            "Default" => Interval::Default,
            "Short" => Interval::Short,
            "Medium" => Interval::Medium,
            "Long" => Interval::Long,
            _ => return Err(ConfigError::Interval(s.to_string())),
        })
    }
}

/// MPS settings of a config, quantities in bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MpsSettings {
    pub active_thread_percentage: Option<u32>,
    pub default_pinned_limit: Option<u64>,
    /// Keyed by GPU UUID or by index in the claim's device list.
    pub per_device_pinned_limit: BTreeMap<String, u64>,
}

/// How a device is shared among a claim's containers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sharing {
    TimeSlicing(Interval),
    Mps(MpsSettings),
}

/// Which device kind a config applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigKind {
    Gpu,
    Mig,
}

impl ConfigKind {
    pub fn name(self) -> &'static str {
        match self {
            ConfigKind::Gpu => "GpuConfig",
            ConfigKind::Mig => "MigDeviceConfig",
        }
    }
}

/// A decoded config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceConfig {
    pub kind: ConfigKind,
    pub sharing: Option<Sharing>,
}

/// Which strategies this node allows (NVIDIA's TimeSlicingSettings / MPSSupport gates).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allowed {
    pub time_slicing: bool,
    pub mps: bool,
    /// MPS shares by consumable capacity (KEP-5075, gate DRAConsumableCapacity): full GPUs are
    /// published multi-allocatable with `threadPercentage` and `memory` capacities, and a share's
    /// consumed capacity becomes its MPS limits.
    pub consumable_mps: bool,
}

impl Default for Allowed {
    fn default() -> Self {
        Allowed {
            time_slicing: true,
            mps: true,
            consumable_mps: false,
        }
    }
}

fn quantity(key: String, v: &Value) -> Result<u64, ConfigError> {
    let text = match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        other => other.to_string(),
    };
    let bytes = parse_bytes(&text).map_err(|e| ConfigError::Limit {
        key: key.clone(),
        message: e.to_string(),
    })?;
    if bytes < MIN_MEMORY_LIMIT {
        return Err(ConfigError::Limit {
            key,
            message: format!("{text} is below the smallest limit, 1Mi"),
        });
    }
    Ok(bytes)
}

fn mps(doc: Option<MpsDoc>) -> Result<MpsSettings, ConfigError> {
    let Some(doc) = doc else {
        return Ok(MpsSettings::default());
    };
    let pct = match doc.default_active_thread_percentage {
        None => None,
        Some(p) if (0..=100).contains(&p) => u32::try_from(p).ok(),
        Some(p) => return Err(ConfigError::ThreadPercentage(p)),
    };
    let default_pinned_limit = doc
        .default_pinned_device_memory_limit
        .as_ref()
        .map(|v| quantity("defaultPinnedDeviceMemoryLimit".into(), v))
        .transpose()?;
    let mut per_device = BTreeMap::new();
    for (k, v) in doc
        .default_per_device_pinned_memory_limit
        .unwrap_or_default()
    {
        let key = format!("defaultPerDevicePinnedMemoryLimit[{k}]");
        per_device.insert(k, quantity(key, &v)?);
    }
    Ok(MpsSettings {
        active_thread_percentage: pct,
        default_pinned_limit,
        per_device_pinned_limit: per_device,
    })
}

fn strategy(
    s: &str,
    ts: Option<TimeSlicingDoc>,
    mps_doc: Option<MpsDoc>,
    allowed: Allowed,
) -> Result<Sharing, ConfigError> {
    match s {
        "TimeSlicing" => {
            if mps_doc.is_some() {
                return Err(ConfigError::Mismatch {
                    sub: "MpsConfig",
                    strategy: "TimeSlicing",
                });
            }
            if !allowed.time_slicing {
                return Err(ConfigError::Disabled("TimeSlicing", "time-slicing"));
            }
            let interval = ts.and_then(|t| t.interval);
            Ok(Sharing::TimeSlicing(match interval {
                None => Interval::Default,
                Some(i) => Interval::parse(&i)?,
            }))
        }
        "MPS" => {
            if ts.is_some() {
                return Err(ConfigError::Mismatch {
                    sub: "TimeSlicingConfig",
                    strategy: "MPS",
                });
            }
            if !allowed.mps {
                return Err(ConfigError::Disabled("MPS", "mps"));
            }
            Ok(Sharing::Mps(mps(mps_doc)?))
        }
        other => Err(ConfigError::Strategy(other.to_string())),
    }
}

/// Decodes one opaque `parameters` object.
pub fn decode(params: &Value, allowed: Allowed) -> Result<DeviceConfig, ConfigError> {
    let field = |k: &str| params.get(k).and_then(Value::as_str).unwrap_or("");
    let (version, kind) = (field("apiVersion"), field("kind"));
    if version != API_VERSION {
        return Err(ConfigError::Version(version.to_string()));
    }
    let decode_err = |e: serde_json::Error| ConfigError::Decode {
        kind: kind.to_string(),
        message: e.to_string(),
    };
    match kind {
        "GpuConfig" => {
            let doc: GpuConfigDoc = serde_json::from_value(params.clone()).map_err(decode_err)?;
            let sharing = doc
                .sharing
                .map(|s| strategy(&s.strategy, s.time_slicing_config, s.mps_config, allowed))
                .transpose()?;
            Ok(DeviceConfig {
                kind: ConfigKind::Gpu,
                sharing,
            })
        }
        "MigDeviceConfig" => {
            let doc: MigConfigDoc = serde_json::from_value(params.clone()).map_err(decode_err)?;
            let sharing = doc
                .sharing
                .map(|s| strategy(&s.strategy, None, s.mps_config, allowed))
                .transpose()?;
            Ok(DeviceConfig {
                kind: ConfigKind::Mig,
                sharing,
            })
        }
        other => Err(ConfigError::Kind(other.to_string())),
    }
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
