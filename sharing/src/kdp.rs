//! NVIDIA k8s-device-plugin (v0.17–v0.20) config compatibility: the checks NVIDIA's plugin
//! makes on the file we share with it, made the same way, on the raw YAML (moved here from
//! gpu-mps-daemon so that the device plugin and the daemon run the same checks).
//!
//! One ConfigMap serves NVIDIA's plugin (or ours) and this daemon, so a file the plugin accepts
//! must not be refused here, and one it refuses must not run MPS here. Facts, from
//! github.com/NVIDIA/k8s-device-plugin v0.20.0 (`../shared/reference/kdp-facts.md`):
//! - `api/config/v1/config.go:parseConfigFrom`: an omitted `version` is `v1`, any other value
//!   fails (`unknown version`); unknown keys are ignored (we warn, naming them);
//! - `api/config/v1/replicas.go` (`ReplicatedResources`/`ReplicatedResource`/
//!   `ReplicatedDevices.UnmarshalJSON`, `ReplicaDeviceRef.Is*`): a sharing section needs a
//!   non-empty `resources`; each needs `name` and `replicas` (at least 2); `devices` is `all`, a
//!   positive count or a list of GPU indexes, MIG indexes `i:j`, `GPU-<uuid>`, `MIG-<uuid>`,
//!   `MIG-GPU-<uuid>/<gi>/<ci>`;
//! - `api/config/v1/resources.go:NewResourceName`: names get the `nvidia.com/` prefix, are at most
//!   63 characters, and the part after it is a DNS subdomain;
//! - `cmd/nvidia-device-plugin/main.go:validateFlags`: strategies must be known, and MPS with
//!   `migStrategy: mixed` is refused; `imex.channelIDs` is `[]` or `[0]`.
//!
//! Deliberate differences: `replicas: 1` is accepted in `sharing.mps` (one client per GPU with a
//! memory limit is a useful MPS setup; the plugin then advertises one MPS replica `<uuid>::0` per
//! GPU); the `mpsDaemon` section is gpu-mps-daemon's and checked strictly there. NVIDIA's corpus
//! exercises neither, so all 78 of its cases agree.

use yaml_serde::{Mapping, Value};

pub use crate::devices::is_device_ref;
use crate::error::{clip, ConfigError, ECHO_MAX};

/// Most MPS clients per GPU: 48 from compute capability 7.5, 16 below
/// (`cmd/mps-control-daemon/mps/device.go:assertReplicas`).
pub fn max_mps_replicas(compute_capability: Option<(u32, u32)>) -> u32 {
    match compute_capability {
        Some(cc) if cc < (7, 5) => 16,
        _ => 48,
    }
}

fn err(key: &str, message: impl Into<String>) -> ConfigError {
    ConfigError::invalid(key, message)
}

fn get<'a>(m: &'a Mapping, key: &str) -> Option<&'a Value> {
    m.get(key).filter(|v| !v.is_null())
}

/// Checks `doc` as NVIDIA's plugin would; returns warnings (unknown keys).
pub fn check(doc: &Value) -> Result<Vec<String>, ConfigError> {
    let empty = Mapping::new();
    let top = match doc {
        Value::Null => &empty,
        Value::Mapping(m) => m,
        _ => return Err(err("(top level)", "the config must be a mapping")),
    };
    match get(top, "version") {
        None => {}
        Some(Value::String(v)) if v == "v1" => {}
        Some(v) => {
            return Err(err(
                "version",
                format!("unknown version: {}; use v1", show(v)),
            ))
        }
    }
    let flags = get(top, "flags").and_then(Value::as_mapping);
    if let Some(f) = flags {
        check_flags(f)?;
    }
    if let Some(ids) = get(top, "imex")
        .and_then(Value::as_mapping)
        .and_then(|m| get(m, "channelIDs"))
    {
        let ok = matches!(ids.as_sequence().map(Vec::as_slice), Some([]))
            || matches!(ids.as_sequence().map(Vec::as_slice), Some([v]) if v.as_u64() == Some(0));
        if !ok {
            return Err(err(
                "imex.channelIDs",
                format!("channelIDs must be [] or [0]; found {}", show(ids)),
            ));
        }
    }
    let sharing = get(top, "sharing").and_then(Value::as_mapping);
    for (key, section) in ["timeSlicing", "mps"]
        .iter()
        .filter_map(|k| Some((*k, get(sharing?, k)?)))
    {
        check_sharing(&format!("sharing.{key}"), section, key == "mps")?;
    }
    let mps = sharing.and_then(|s| get(s, "mps")).is_some();
    let mig = flags
        .and_then(|f| get(f, "migStrategy"))
        .and_then(Value::as_str);
    if mps && mig == Some("mixed") {
        return Err(err(
            "flags.migStrategy",
            "using --mig-strategy=mixed is not supported with MPS (as NVIDIA's plugin refuses it); use none or single, or remove sharing.mps",
        ));
    }
    Ok(unknown_keys(top))
}

fn show(v: &Value) -> String {
    let s = yaml_serde::to_string(v).unwrap_or_default();
    clip(s.trim(), ECHO_MAX)
}

fn one_of(key: &str, v: &Value, allowed: &[&str], what: &str) -> Result<(), ConfigError> {
    match v.as_str() {
        Some(s) if allowed.contains(&s) => Ok(()),
        _ => Err(err(
            key,
            format!(
                "invalid {what}: {}; use one of {}",
                show(v),
                allowed.join(", ")
            ),
        )),
    }
}

fn check_flags(f: &Mapping) -> Result<(), ConfigError> {
    if let Some(v) = get(f, "migStrategy") {
        one_of(
            "flags.migStrategy",
            v,
            &["none", "single", "mixed"],
            "MIG strategy",
        )?;
    }
    if let Some(v) = get(f, "deviceDiscoveryStrategy") {
        one_of(
            "flags.deviceDiscoveryStrategy",
            v,
            &["auto", "nvml", "tegra"],
            "device discovery strategy",
        )?;
    }
    let Some(p) = get(f, "plugin").and_then(Value::as_mapping) else {
        return Ok(());
    };
    if let Some(v) = get(p, "deviceListStrategy") {
        let list = ["envvar", "volume-mounts", "cdi-annotations", "cdi-cri"];
        let key = "flags.plugin.deviceListStrategy";
        match v.as_sequence() {
            Some(items) => items
                .iter()
                .try_for_each(|i| one_of(key, i, &list, "device list strategy"))?,
            None => one_of(key, v, &list, "device list strategy")?,
        }
    }
    if let Some(v) = get(p, "deviceIDStrategy") {
        one_of(
            "flags.plugin.deviceIDStrategy",
            v,
            &["uuid", "index"],
            "device ID strategy",
        )?;
    }
    if let Some(v) = get(p, "sharedDevicesAllocationPolicy") {
        one_of(
            "flags.plugin.sharedDevicesAllocationPolicy",
            v,
            &["distributed", "packed"],
            "shared devices allocation policy",
        )?;
    }
    Ok(())
}

fn check_sharing(key: &str, section: &Value, mps: bool) -> Result<(), ConfigError> {
    let m = section
        .as_mapping()
        .ok_or_else(|| err(key, "must be a mapping with `resources`"))?;
    if let Some(st) = get(m, "strategy").filter(|v| v.as_str() != Some("")) {
        return Err(err(
            &format!("{key}.strategy"),
            format!("unknown time-slicing strategy: {}", show(st)),
        ));
    }
    let resources = get(m, "resources")
        .and_then(Value::as_sequence)
        .filter(|r| !r.is_empty())
        .ok_or_else(|| {
            err(
                &format!("{key}.resources"),
                "no resources specified; add at least one entry with `name` and `replicas`",
            )
        })?;
    for (i, r) in resources.iter().enumerate() {
        check_resource(&format!("{key}.resources[{i}]"), r, mps)?;
    }
    Ok(())
}

fn check_resource(key: &str, r: &Value, mps: bool) -> Result<(), ConfigError> {
    let m = r
        .as_mapping()
        .ok_or_else(|| err(key, "must be a mapping with `name` and `replicas`"))?;
    let name = get(m, "name").ok_or_else(|| err(key, "no resource name specified"))?;
    check_name(&format!("{key}.name"), name)?;
    if let Some(d) = get(m, "devices") {
        check_devices(&format!("{key}.devices"), d)?;
    }
    let replicas = get(m, "replicas").ok_or_else(|| err(key, "no replicas specified"))?;
    let min = if mps { 1 } else { 2 };
    match replicas.as_i64() {
        Some(n) if n >= min => {}
        _ => {
            return Err(err(
                &format!("{key}.replicas"),
                format!(
                    "number of replicas must be >= {min}, got {}",
                    show(replicas)
                ),
            ))
        }
    }
    if let Some(rename) = get(m, "rename") {
        check_name(&format!("{key}.rename"), rename)?;
    }
    Ok(())
}

/// `NewResourceName`: prefix `nvidia.com/`, at most 63 characters, DNS subdomain after it.
fn check_name(key: &str, v: &Value) -> Result<(), ConfigError> {
    let s = v.as_str().ok_or_else(|| {
        err(
            key,
            format!("a resource name must be a string, got {}", show(v)),
        )
    })?;
    let full = if s.starts_with("nvidia.com/") {
        s.to_string()
    } else {
        format!("nvidia.com/{s}")
    };
    if full.len() > 63 {
        return Err(err(
            key,
            format!("fully-qualified resource name must be 63 characters or less: {full}"),
        ));
    }
    let name = full.split_once('/').map_or(full.as_str(), |(_, n)| n);
    if !is_dns_subdomain(name) {
        return Err(err(
            key,
            format!("incorrect format for resource name '{}': must be lowercase letters, digits, '-' and '.'", clip(&full, 80)),
        ));
    }
    Ok(())
}

/// RFC 1123 subdomain, as Kubernetes checks it.
fn is_dns_subdomain(s: &str) -> bool {
    let label = |l: &str| {
        let b = l.as_bytes();
        !b.is_empty()
            && b.iter()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
            && b[0] != b'-'
            && b[b.len() - 1] != b'-'
    };
    !s.is_empty() && s.len() <= 253 && s.split('.').all(label)
}

fn check_devices(key: &str, v: &Value) -> Result<(), ConfigError> {
    match v {
        Value::String(s) if s == "all" => Ok(()),
        Value::String(s) => Err(err(
            key,
            format!(
                "devices set as '{}' but the only valid string input is 'all'",
                clip(s, 80)
            ),
        )),
        Value::Number(n) => match n.as_f64() {
            // YAML -> JSON turns 2.0 into 2, which counts.
            Some(f) if f.fract() == 0.0 && f >= 1.0 => Ok(()),
            _ => Err(err(
                key,
                format!("devices set as '{n}' but a count of devices must be > 0"),
            )),
        },
        Value::Sequence(items) => items.iter().try_for_each(|i| {
            let ok = match i {
                Value::Number(n) => n.as_u64().is_some(),
                Value::String(s) => is_device_ref(s),
                _ => false,
            };
            if ok {
                Ok(())
            } else {
                Err(err(
                    key,
                    format!("unsupported type for device in devices list: {}", show(i)),
                ))
            }
        }),
        _ => Err(err(
            key,
            format!("unrecognized type for devices spec: {}", show(v)),
        )),
    }
}

const TOP: &[&str] = &[
    "version",
    "flags",
    "resources",
    "sharing",
    "imex",
    "mpsDaemon",
];
const SHARING: &[&str] = &["timeSlicing", "mps"];
const SECTION: &[&str] = &[
    "strategy",
    "renameByDefault",
    "failRequestsGreaterThanOne",
    "resources",
];
const RESOURCE: &[&str] = &["name", "rename", "devices", "replicas"];
const FLAGS: &[&str] = &[
    "migStrategy",
    "failOnInitError",
    "mpsRoot",
    "nvidiaDriverRoot",
    "nvidiaDevRoot",
    "gdsEnabled",
    "mofedEnabled",
    "gdrcopyEnabled",
    "useNodeFeatureAPI",
    "deviceDiscoveryStrategy",
    "plugin",
    "gfd",
];
const PLUGIN: &[&str] = &[
    "passDeviceSpecs",
    "deviceListStrategy",
    "deviceIDStrategy",
    "cdiAnnotationPrefix",
    "nvidiaCTKPath",
    "containerDriverRoot",
    "sharedDevicesAllocationPolicy",
];

fn unknown_in(m: &Mapping, known: &[&str], at: &str, out: &mut Vec<String>) {
    for k in m.keys() {
        let name = k.as_str().unwrap_or("?");
        if !known.contains(&name) {
            out.push(format!(
                "{at}{name}: unknown key, ignored (as NVIDIA's plugin ignores it)"
            ));
        }
    }
}

/// Keys NVIDIA's plugin does not know (our `mpsDaemon` section is checked strictly elsewhere).
fn unknown_keys(top: &Mapping) -> Vec<String> {
    let mut out = Vec::new();
    unknown_in(top, TOP, "", &mut out);
    if let Some(f) = get(top, "flags").and_then(Value::as_mapping) {
        unknown_in(f, FLAGS, "flags.", &mut out);
        if let Some(p) = get(f, "plugin").and_then(Value::as_mapping) {
            unknown_in(p, PLUGIN, "flags.plugin.", &mut out);
        }
    }
    let sharing = get(top, "sharing").and_then(Value::as_mapping);
    if let Some(s) = sharing {
        unknown_in(s, SHARING, "sharing.", &mut out);
        for key in SHARING {
            let Some(sec) = get(s, key).and_then(Value::as_mapping) else {
                continue;
            };
            unknown_in(sec, SECTION, &format!("sharing.{key}."), &mut out);
            let list = get(sec, "resources").and_then(Value::as_sequence);
            for (i, r) in list.into_iter().flatten().enumerate() {
                if let Some(r) = r.as_mapping() {
                    unknown_in(
                        r,
                        RESOURCE,
                        &format!("sharing.{key}.resources[{i}]."),
                        &mut out,
                    );
                }
            }
        }
    }
    out
}

#[cfg(test)]
#[path = "kdp_tests.rs"]
mod tests;
