//! The mig-parted config file, spec `v1`, parsed as mig-parted v0.15.0 parses it
//! (`api/spec/v1/spec.go`): YAML decoded to a JSON-like value, then checked key by key.
//!
//! Every refusal names the file, the config name, the entry and the key
//! (`config.yaml: mig-configs.all-1g.10gb[0].devices: …`). What mig-parted accepts we accept:
//! an empty document (no configs), `{version: v1}` alone, flow style with tabs and trailing
//! commas, a malformed `device-filter` (it then never matches), and profile names that no GPU
//! has (`0g.0gb`): existence is checked per GPU when a plan is made.
//!
//! Tabs: mig-parted's spec test strings indent flow mappings with tabs, which Go's YAML accepts
//! and PyYAML refuses. `yaml_serde` accepts them as Go does (all 23 cases, `tests/reference_cases.rs`,
//! and `tabs_in_flow_mappings_are_accepted` below), so no pre-processing is needed.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::profile::MigProfile;

/// Bytes read at most from a config file (mig-parted configs are a few KiB).
pub const MAX_CONFIG_BYTES: usize = 4 << 20;

/// A parsed config file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MigConfigFile {
    /// Where it came from (a path, `-` for stdin, a ConfigMap key), for messages.
    pub source: String,
    /// `mig-configs`: config name -> entries, in name order.
    pub configs: BTreeMap<String, Vec<MigConfigSpec>>,
}

/// `devices` of an entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Devices {
    All,
    /// GPU indexes (position in PCI order).
    List(Vec<i64>),
}

/// One entry of a config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigConfigSpec {
    /// `device-filter` ids (empty: every GPU); kept as written.
    pub device_filter: Vec<String>,
    pub devices: Devices,
    pub mig_enabled: bool,
    /// `mig-devices`: profile name (as written) -> count.
    pub mig_devices: BTreeMap<String, u32>,
}

/// A config the file cannot be: which file, where in it, what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{source_name}: {path}: {message}")]
pub struct ConfigError {
    pub source_name: String,
    /// `version`, `mig-configs.<name>[<i>].<key>`, …
    pub path: String,
    pub message: String,
}

type Check<T> = Result<T, (String, String)>;

fn fail<T>(path: impl Into<String>, message: impl Into<String>) -> Check<T> {
    Err((path.into(), message.into()))
}

impl MigConfigFile {
    /// Parses a config file's bytes; `source` names it in errors.
    pub fn parse(bytes: &[u8], source: &str) -> Result<MigConfigFile, ConfigError> {
        let wrap = |(path, message): (String, String)| ConfigError {
            source_name: source.to_string(),
            path,
            message,
        };
        let value = parse_yaml(bytes).map_err(wrap)?;
        let configs = match value {
            None | Some(Value::Null) => BTreeMap::new(),
            Some(v) => parse_spec(&v).map_err(wrap)?,
        };
        Ok(MigConfigFile {
            source: source.to_string(),
            configs,
        })
    }

    /// The entries of config `name`, or an error naming the configs there are.
    pub fn config(&self, name: &str) -> Result<&[MigConfigSpec], ConfigError> {
        self.configs
            .get(name)
            .map(Vec::as_slice)
            .ok_or_else(|| ConfigError {
                source_name: self.source.clone(),
                path: "mig-configs".into(),
                message: format!(
                    "selected mig-config not present: {name} (the file has: {})",
                    self.names().join(", ")
                ),
            })
    }

    /// Config names, sorted.
    pub fn names(&self) -> Vec<&str> {
        self.configs.keys().map(String::as_str).collect()
    }

    /// The config `-c` selects: `name`, or the only one when the file has exactly one.
    pub fn selected_name<'a>(&'a self, name: Option<&'a str>) -> Result<&'a str, ConfigError> {
        match (name, self.configs.len()) {
            (Some(n), _) => Ok(n),
            (None, 1) => Ok(self.names()[0]),
            (None, _) => Err(ConfigError {
                source_name: self.source.clone(),
                path: "mig-configs".into(),
                message: format!(
                    "the file has {} configs: select one with -c/--selected-config or MIG_PARTED_SELECTED_CONFIG ({})",
                    self.configs.len(),
                    self.names().join(", ")
                ),
            }),
        }
    }
}

/// YAML (a superset of JSON) to a JSON value; `None` for an empty document.
fn parse_yaml(bytes: &[u8]) -> Check<Option<Value>> {
    if bytes.len() > MAX_CONFIG_BYTES {
        return fail("", format!("larger than {MAX_CONFIG_BYTES} bytes"));
    }
    let text =
        std::str::from_utf8(bytes).map_err(|e| ("".to_string(), format!("not UTF-8: {e}")))?;
    if text
        .lines()
        .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'))
    {
        return Ok(None);
    }
    yaml_serde::from_str::<Value>(text)
        .map(Some)
        .map_err(|e| ("".to_string(), format!("not valid YAML: {e}")))
}

fn parse_spec(v: &Value) -> Check<BTreeMap<String, Vec<MigConfigSpec>>> {
    let Value::Object(top) = v else {
        return fail(
            "",
            "the file must be a mapping with keys 'version' and 'mig-configs'",
        );
    };
    match top.get("version") {
        None => return fail("version", "unable to parse with missing 'version' field"),
        Some(Value::String(s)) if s == "v1" => {}
        Some(other) => {
            return fail(
                "version",
                format!("unknown version: {} (use v1)", show(other)),
            )
        }
    }
    if let Some(k) = top.keys().find(|k| *k != "version" && *k != "mig-configs") {
        return fail(
            k.as_str(),
            format!("unexpected field: {k} (allowed: version, mig-configs)"),
        );
    }
    let Some(configs) = top.get("mig-configs") else {
        return Ok(BTreeMap::new());
    };
    let Value::Object(configs) = configs else {
        return fail(
            "mig-configs",
            "must be a mapping of config name -> list of entries",
        );
    };
    if configs.is_empty() {
        return fail(
            "mig-configs",
            "at least one entry in 'mig-configs' is required",
        );
    }
    let mut out = BTreeMap::new();
    for (name, entries) in configs {
        let path = format!("mig-configs.{name}");
        let Value::Array(entries) = entries else {
            return fail(path, "must be a list of entries");
        };
        if entries.is_empty() {
            return fail(path, format!("at least one entry in '{name}' is required"));
        }
        let parsed = entries
            .iter()
            .enumerate()
            .map(|(i, e)| parse_entry(e, &format!("{path}[{i}]")))
            .collect::<Check<Vec<_>>>()?;
        out.insert(name.clone(), parsed);
    }
    Ok(out)
}

fn show(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

const ENTRY_KEYS: [&str; 4] = ["device-filter", "devices", "mig-enabled", "mig-devices"];

/// One entry (`MigConfigSpec`); `path` is where it is in the file.
pub(crate) fn parse_entry(v: &Value, path: &str) -> Check<MigConfigSpec> {
    let Value::Object(m) = v else {
        return fail(
            path,
            "an entry must be a mapping with keys devices, mig-enabled, mig-devices, device-filter",
        );
    };
    if let Some(k) = m.keys().find(|k| !ENTRY_KEYS.contains(&k.as_str())) {
        return fail(
            format!("{path}.{k}"),
            format!("unexpected field: {k} (allowed: {})", ENTRY_KEYS.join(", ")),
        );
    }
    let devices = parse_devices(m, path)?;
    let mig_enabled = match m.get("mig-enabled") {
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            return fail(
                format!("{path}.mig-enabled"),
                format!("must be true or false, not {other}"),
            )
        }
        None => {
            return fail(
                format!("{path}.mig-enabled"),
                "missing required field: mig-enabled",
            )
        }
    };
    let device_filter = parse_filter(m, path)?;
    let mig_devices = parse_mig_devices(m, path, mig_enabled)?;
    Ok(MigConfigSpec {
        device_filter,
        devices,
        mig_enabled,
        mig_devices,
    })
}

fn parse_devices(m: &Map<String, Value>, path: &str) -> Check<Devices> {
    let p = format!("{path}.devices");
    match m.get("devices") {
        None => fail(p, "missing required field: devices"),
        Some(Value::String(s)) if s == "all" => Ok(Devices::All),
        Some(Value::String(s)) => fail(
            p,
            format!(
                "invalid string input for 'devices': {s} (use \"all\" or a list of GPU indexes)"
            ),
        ),
        Some(Value::Array(items)) => items
            .iter()
            .map(|i| match i.as_i64() {
                Some(n) => Ok(n),
                None => fail(p.clone(), format!("{i} is not a GPU index (an integer)")),
            })
            .collect::<Check<Vec<_>>>()
            .map(Devices::List),
        Some(other) => fail(
            p,
            format!("must be \"all\" or a list of GPU indexes, not {other}"),
        ),
    }
}

fn parse_filter(m: &Map<String, Value>, path: &str) -> Check<Vec<String>> {
    let p = format!("{path}.device-filter");
    match m.get("device-filter") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![s.clone()]),
        Some(Value::Array(items)) => items
            .iter()
            .map(|i| match i {
                Value::String(s) => Ok(s.clone()),
                other => fail(
                    p.clone(),
                    format!("{other} is not a PCI id string like \"0x20B010DE\""),
                ),
            })
            .collect(),
        Some(other) => fail(
            p,
            format!("must be a PCI id string or a list of them, not {other}"),
        ),
    }
}

fn parse_mig_devices(
    m: &Map<String, Value>,
    path: &str,
    enabled: bool,
) -> Check<BTreeMap<String, u32>> {
    let p = format!("{path}.mig-devices");
    let map =
        match m.get("mig-devices") {
            None | Some(Value::Null) if enabled => return fail(
                p,
                "missing required field 'mig-devices' when 'mig-enabled' is true (use {} for none)",
            ),
            None | Some(Value::Null) => return Ok(BTreeMap::new()),
            Some(Value::Object(map)) => map,
            Some(other) => {
                return fail(
                    p,
                    format!("must be a mapping of profile name -> count, not {other}"),
                )
            }
        };
    if !enabled && !map.is_empty() {
        return fail(p, "MIG devices included when 'mig-enabled' is false");
    }
    let mut out = BTreeMap::new();
    for (name, count) in map {
        let kp = format!("{p}.{name}");
        MigProfile::parse(name).map_err(|e| (kp.clone(), e.to_string()))?;
        let n = count
            .as_i64()
            .ok_or_else(|| (kp.clone(), format!("count {count} is not an integer")))?;
        let n =
            u32::try_from(n).map_err(|_| (kp.clone(), format!("count {n} must be 0 or more")))?;
        out.insert(name.clone(), n);
    }
    if !out.is_empty() && out.values().all(|&n| n == 0) {
        return fail(p, "all counts for all MigProfiles are 0");
    }
    Ok(out)
}

/// Parses one entry on its own (mig-parted's `MigConfigSpec` unmarshal), for its test cases;
/// `Ok(None)` for an empty document.
pub fn parse_entry_document(
    bytes: &[u8],
    source: &str,
) -> Result<Option<MigConfigSpec>, ConfigError> {
    let wrap = |(path, message): (String, String)| ConfigError {
        source_name: source.to_string(),
        path,
        message,
    };
    match parse_yaml(bytes).map_err(wrap)? {
        None | Some(Value::Null) => Ok(None),
        Some(v) => parse_entry(&v, "entry").map(Some).map_err(wrap),
    }
}

#[cfg(test)]
#[path = "spec_tests.rs"]
mod tests;
