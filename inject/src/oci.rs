//! The two OCI inputs a hook reads: the state on stdin and the bundle's `config.json`. Only the
//! fields we use are modelled; unknown fields are ignored so newer runtimes keep working.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::cgroup::{DeviceRule, DeviceType};
use crate::error::{InjectError, Result};

/// Largest state / config we accept (both are small; this bounds a hostile input).
const MAX_JSON: u64 = 16 << 20;

/// The container state a hook receives on stdin.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OciState {
    pub oci_version: String,
    pub id: String,
    pub status: String,
    #[serde(default)]
    pub pid: Option<i32>,
    pub bundle: PathBuf,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

impl OciState {
    /// Parse the state from a reader (a hook's stdin).
    pub fn from_reader(reader: impl std::io::Read) -> Result<Self> {
        use std::io::Read;
        let mut buf = Vec::new();
        reader
            .take(MAX_JSON)
            .read_to_end(&mut buf)
            .map_err(|e| oci_err("state", e.to_string()))?;
        Self::from_slice(&buf)
    }

    /// Parse the state from bytes.
    pub fn from_slice(bytes: &[u8]) -> Result<Self> {
        serde_json::from_slice(bytes).map_err(|e| {
            oci_err(
                "state",
                format!("{e} (a hook expects the runtime's state JSON on stdin)"),
            )
        })
    }

    /// The pid, required by hooks that enter namespaces or cgroups.
    pub fn require_pid(&self) -> Result<i32> {
        match self.pid {
            Some(p) if p > 0 => Ok(p),
            _ => Err(oci_err(
                "state",
                "no container pid; run this as a prestart/createContainer hook".into(),
            )),
        }
    }
}

/// An OCI input error; the reason is capped, since parsers quote the (image-controlled) input.
fn oci_err(what: &str, reason: String) -> InjectError {
    InjectError::Oci {
        what: gpuhook_node::bounded::cap_message(what),
        reason: gpuhook_node::bounded::cap_message(&reason),
    }
}

#[derive(Deserialize)]
struct RawConfig {
    root: Option<RawRoot>,
    #[serde(default)]
    process: Option<RawProcess>,
    #[serde(default)]
    linux: Option<RawLinux>,
}
#[derive(Deserialize)]
struct RawRoot {
    path: PathBuf,
}
#[derive(Deserialize)]
struct RawProcess {
    user: Option<RawUser>,
}
#[derive(Deserialize)]
struct RawUser {
    #[serde(default)]
    uid: u32,
    #[serde(default)]
    gid: u32,
}
#[derive(Deserialize)]
struct RawLinux {
    resources: Option<RawResources>,
}
#[derive(Deserialize)]
struct RawResources {
    #[serde(default)]
    devices: Vec<RawDevice>,
}
#[derive(Deserialize)]
struct RawDevice {
    allow: bool,
    #[serde(rename = "type")]
    kind: Option<String>,
    major: Option<i64>,
    minor: Option<i64>,
    access: Option<String>,
}

/// What the hooks need from `<bundle>/config.json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BundleConfig {
    /// `root.path`, made absolute against the bundle.
    pub rootfs: PathBuf,
    pub uid: u32,
    pub gid: u32,
    /// `linux.resources.devices`, in order (the cgroup v2 program is rebuilt from them).
    pub device_rules: Vec<DeviceRule>,
}

impl BundleConfig {
    /// Read `<bundle>/config.json`.
    pub fn load(bundle: &Path) -> Result<Self> {
        let path = bundle.join("config.json");
        let bytes = std::fs::read(&path).map_err(|source| InjectError::Io {
            op: "read bundle config",
            path: path.clone(),
            error: source,
        })?;
        Self::parse(bundle, &bytes)
    }

    /// Parse a config.json belonging to `bundle`.
    pub fn parse(bundle: &Path, bytes: &[u8]) -> Result<Self> {
        let what = format!("config {}", bundle.join("config.json").display());
        let raw: RawConfig =
            serde_json::from_slice(bytes).map_err(|e| oci_err(&what, e.to_string()))?;
        Self::from_raw(bundle, raw, &what)
    }

    /// The typed view of a config.json of `bundle` the caller already parsed (the hook keeps the
    /// `Value` for the request: the file is parsed once).
    pub fn from_value(bundle: &Path, value: &serde_json::Value) -> Result<Self> {
        let what = format!("config {}", bundle.join("config.json").display());
        let raw = RawConfig::deserialize(value).map_err(|e| oci_err(&what, e.to_string()))?;
        Self::from_raw(bundle, raw, &what)
    }

    fn from_raw(bundle: &Path, raw: RawConfig, what: &str) -> Result<Self> {
        let root = raw
            .root
            .ok_or_else(|| oci_err(what, "missing root.path".into()))?;
        if root.path.as_os_str().is_empty() {
            return Err(oci_err(what, "empty root.path".into()));
        }
        let rootfs = if root.path.is_absolute() {
            root.path
        } else {
            bundle.join(root.path)
        };
        let (uid, gid) = raw
            .process
            .and_then(|p| p.user)
            .map_or((0, 0), |u| (u.uid, u.gid));
        let mut device_rules = Vec::new();
        for d in raw
            .linux
            .and_then(|l| l.resources)
            .map(|r| r.devices)
            .unwrap_or_default()
        {
            let kind = match d.kind.as_deref().unwrap_or("a") {
                "a" => DeviceType::All,
                "c" => DeviceType::Char,
                "b" => DeviceType::Block,
                other => {
                    return Err(oci_err(
                        what,
                        format!("device rule type {other:?} is not a/b/c"),
                    ))
                }
            };
            let num = |v: Option<i64>| -> Result<Option<u32>> {
                match v {
                    None | Some(-1) => Ok(None),
                    Some(n) => u32::try_from(n)
                        .map(Some)
                        .map_err(|_| oci_err(what, format!("device number {n} out of range"))),
                }
            };
            let rule = DeviceRule::new(
                d.allow,
                kind,
                num(d.major)?,
                num(d.minor)?,
                d.access.as_deref().unwrap_or("rwm"),
            )?;
            device_rules.push(rule);
        }
        Ok(BundleConfig {
            rootfs,
            uid,
            gid,
            device_rules,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_ignores_unknown_fields_and_reads_annotations() {
        let s = OciState::from_slice(
            br#"{"ociVersion":"1.0.2","id":"c1","status":"creating","pid":42,
                 "bundle":"/b","annotations":{"cdi.k8s.io/x":"nvidia.com/gpu=0"},"extra":1}"#,
        )
        .unwrap();
        assert_eq!(s.pid, Some(42));
        assert_eq!(s.require_pid().unwrap(), 42);
        assert_eq!(s.annotations["cdi.k8s.io/x"], "nvidia.com/gpu=0");
        let no_pid = OciState::from_slice(
            br#"{"ociVersion":"1.0.2","id":"c1","status":"creating","bundle":"/b"}"#,
        )
        .unwrap();
        assert!(no_pid.require_pid().is_err());
        let err = OciState::from_slice(b"not json").unwrap_err().to_string();
        assert!(err.contains("stdin"), "{err}");
    }

    #[test]
    fn bundle_root_is_relative_to_bundle_and_rules_parse() {
        let cfg = BundleConfig::parse(
            Path::new("/run/b"),
            br#"{"root":{"path":"rootfs"},"process":{"user":{"uid":1000,"gid":100}},
                "linux":{"resources":{"devices":[{"allow":false,"access":"rwm"},
                {"allow":true,"type":"c","major":195,"minor":-1,"access":"rw"}]}}}"#,
        )
        .unwrap();
        assert_eq!(cfg.rootfs, Path::new("/run/b/rootfs"));
        assert_eq!((cfg.uid, cfg.gid), (1000, 100));
        assert_eq!(cfg.device_rules.len(), 2);
        assert_eq!(cfg.device_rules[1].major, Some(195));
        assert_eq!(cfg.device_rules[1].minor, None);
        let abs = BundleConfig::parse(Path::new("/b"), br#"{"root":{"path":"/abs/r"}}"#).unwrap();
        assert_eq!(abs.rootfs, Path::new("/abs/r"));
        assert!(BundleConfig::parse(Path::new("/b"), br#"{}"#).is_err());
        assert!(BundleConfig::parse(
            Path::new("/b"),
            br#"{"root":{"path":"r"},"linux":{"resources":{"devices":[{"allow":true,"type":"x"}]}}}"#
        )
        .is_err());
    }

    #[test]
    fn from_value_is_parse_without_a_second_parse() {
        let bytes = br#"{"root":{"path":"rootfs"},"process":{"user":{"uid":7,"gid":8}},"x":1,
            "linux":{"resources":{"devices":[{"allow":true,"type":"c","major":195,"access":"rw"}]}}}"#;
        let value: serde_json::Value = serde_json::from_slice(bytes).unwrap();
        let b = Path::new("/run/b");
        assert_eq!(
            BundleConfig::from_value(b, &value).unwrap(),
            BundleConfig::parse(b, bytes).unwrap()
        );
        let bad = serde_json::json!({"root": {"path": "r"}, "process": {"user": {"uid": -1}}});
        let err = BundleConfig::from_value(b, &bad).unwrap_err().to_string();
        assert!(err.contains("config /run/b/config.json"), "{err}");
        assert!(BundleConfig::from_value(b, &serde_json::json!({})).is_err());
    }
}
