//! The CDI document model.
//!
//! Field names and optionality follow the CDI spec (`specs-go/config.go` upstream). Every struct
//! rejects unknown fields on input, like the Go library the runtimes embed (`yaml.UnmarshalStrict`):
//! a spec we accept is one podman/containerd/CRI-O accept too. Empty optional fields are never
//! written, and maps are `BTreeMap`s, so the same model always serialises to the same bytes.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::CdiError;

/// A whole CDI spec file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Spec {
    pub cdi_version: String,
    /// `vendor/class`, e.g. `nvidia.com/gpu`.
    pub kind: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    pub devices: Vec<Device>,
    /// Edits applied once for any device of this spec.
    #[serde(default, skip_serializing_if = "ContainerEdits::is_empty")]
    pub container_edits: ContainerEdits,
}

/// One named device of a spec.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Device {
    pub name: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    pub container_edits: ContainerEdits,
}

/// What to change in a container for a device (or for every device of a spec).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ContainerEdits {
    /// `KEY=VALUE` entries.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub device_nodes: Vec<DeviceNode>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub net_devices: Vec<NetDevice>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<Hook>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<Mount>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intel_rdt: Option<IntelRdt>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub additional_gids: Vec<u32>,
}

impl ContainerEdits {
    /// True when applying these edits would change nothing.
    pub fn is_empty(&self) -> bool {
        self.env.is_empty()
            && self.device_nodes.is_empty()
            && self.net_devices.is_empty()
            && self.hooks.is_empty()
            && self.mounts.is_empty()
            && self.intel_rdt.is_none()
            && self.additional_gids.is_empty()
    }

    /// Appends `other` (no de-duplication; consumers replace by key/path/destination).
    pub fn append(&mut self, other: ContainerEdits) {
        self.env.extend(other.env);
        self.device_nodes.extend(other.device_nodes);
        self.net_devices.extend(other.net_devices);
        self.hooks.extend(other.hooks);
        self.mounts.extend(other.mounts);
        if other.intel_rdt.is_some() {
            self.intel_rdt = other.intel_rdt;
        }
        for gid in other.additional_gids {
            if !self.additional_gids.contains(&gid) {
                self.additional_gids.push(gid);
            }
        }
    }
}

/// A device node to create in the container.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeviceNode {
    /// Path in the container.
    pub path: String,
    /// Path on the host (defaults to `path`; needs cdiVersion 0.5.0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_path: Option<String>,
    /// `b`, `c`, `u` or `p`.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub device_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub major: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minor: Option<i64>,
    /// Permission bits as a decimal integer (`438` = 0o666).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_mode: Option<u32>,
    /// Cgroup access, a subset of `rwm`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permissions: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gid: Option<u32>,
}

/// A mount to add to the container.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Mount {
    pub host_path: String,
    pub container_path: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
    /// Mount type (needs cdiVersion 0.4.0).
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub mount_type: Option<String>,
}

/// An OCI hook to add to the container.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Hook {
    /// `prestart`, `createRuntime`, `createContainer`, `startContainer`, `poststart`, `poststop`.
    pub hook_name: String,
    pub path: String,
    /// argv; `args[0]` is the program name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// The hook's whole environment (never inherited from the container when set).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<i64>,
}

/// A host network interface moved into the container (cdiVersion 1.1.0).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NetDevice {
    pub host_interface_name: String,
    pub name: String,
}

/// Intel RDT settings (cdiVersion 0.7.0; `schemata`/`enableMonitoring` 1.1.0).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IntelRdt {
    #[serde(default, rename = "closID", skip_serializing_if = "Option::is_none")]
    pub clos_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub l3_cache_schema: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_bw_schema: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub schemata: Vec<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub enable_monitoring: bool,
}

/// Serialisation format of a spec file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    Json,
    Yaml,
}

impl Format {
    /// The format a spec directory entry is read as: `*.json` or `*.yaml` (not `.yml`, like the
    /// CDI library); `None` for any other file.
    pub fn from_path(path: &Path) -> Option<Format> {
        match path.extension()?.to_str()? {
            "json" => Some(Format::Json),
            "yaml" => Some(Format::Yaml),
            _ => None,
        }
    }

    /// Guesses the format of raw bytes: JSON when the first non-blank byte is `{`.
    pub fn sniff(bytes: &[u8]) -> Format {
        match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
            Some(b'{') => Format::Json,
            _ => Format::Yaml,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Format::Json => "json",
            Format::Yaml => "yaml",
        }
    }
}

/// Reads a spec file's bytes, refusing one larger than any real spec
/// ([`gpuhook_node::bounded::MAX_CDI_SPEC_BYTES`]: spec directories may hold anyone's files, even
/// a `/dev/zero` behind a symlink).
pub fn read_spec_file(path: &std::path::Path) -> Result<Vec<u8>, CdiError> {
    use gpuhook_node::bounded::{read_bounded, MAX_CDI_SPEC_BYTES};
    Ok(read_bounded(path, MAX_CDI_SPEC_BYTES)?)
}

impl Spec {
    /// Parses a spec; `format` `None` sniffs it from the content.
    pub fn from_slice(bytes: &[u8], format: Option<Format>) -> Result<Spec, CdiError> {
        let format = format.unwrap_or_else(|| Format::sniff(bytes));
        let parsed = match format {
            Format::Json => serde_json::from_slice(bytes).map_err(|e| e.to_string()),
            Format::Yaml => yaml_serde::from_slice(bytes).map_err(|e| e.to_string()),
        };
        // Parsers quote a value of the wrong type whole: cap it (the file may be anyone's).
        parsed.map_err(|message| CdiError::Parse {
            format,
            message: gpuhook_node::bounded::cap_message(&message),
        })
    }

    /// Serialises the spec: pretty JSON with a trailing newline, or YAML. Deterministic.
    pub fn to_bytes(&self, format: Format) -> Result<Vec<u8>, CdiError> {
        match format {
            Format::Json => {
                let mut out = serde_json::to_vec_pretty(self)
                    .map_err(|e| CdiError::Serialize(e.to_string()))?;
                out.push(b'\n');
                Ok(out)
            }
            Format::Yaml => yaml_serde::to_string(self)
                .map(String::into_bytes)
                .map_err(|e| CdiError::Serialize(e.to_string())),
        }
    }

    /// The spec's devices as `(vendor/class=name, device)` pairs.
    pub fn qualified_devices(&self) -> impl Iterator<Item = (String, &Device)> + '_ {
        self.devices
            .iter()
            .map(move |d| (format!("{}={}", self.kind, d.name), d))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_files_are_read_bounded_with_typed_errors() {
        let err = read_spec_file(std::path::Path::new("/dev/zero")).unwrap_err();
        assert!(matches!(err, CdiError::TooLarge { .. }), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("none.json");
        let err = read_spec_file(&missing).unwrap_err();
        assert!(
            matches!(&err, CdiError::Io { op: "read", error, .. } if error.kind() == std::io::ErrorKind::NotFound),
            "{err}"
        );
        std::fs::write(&missing, b"{}").unwrap();
        assert_eq!(read_spec_file(&missing).unwrap(), b"{}");
    }

    fn sample() -> Spec {
        Spec {
            cdi_version: "0.5.0".into(),
            kind: "nvidia.com/gpu".into(),
            devices: vec![Device {
                name: "0".into(),
                container_edits: ContainerEdits {
                    device_nodes: vec![DeviceNode {
                        path: "/dev/nvidia0".into(),
                        device_type: Some("c".into()),
                        major: Some(195),
                        minor: Some(0),
                        ..Default::default()
                    }],
                    ..Default::default()
                },
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn json_round_trip_omits_empty_fields() {
        let spec = sample();
        let bytes = spec.to_bytes(Format::Json).unwrap();
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert!(!text.contains("annotations"), "{text}");
        assert!(!text.contains("hostPath"), "{text}");
        assert!(!text.contains("\"containerEdits\": {}"), "{text}");
        assert!(text.contains("\"type\": \"c\""), "{text}");
        assert!(text.ends_with("}\n"));
        assert_eq!(Spec::from_slice(&bytes, None).unwrap(), spec);
        assert_eq!(spec.to_bytes(Format::Json).unwrap(), bytes, "deterministic");
    }

    #[test]
    fn yaml_round_trip() {
        let spec = sample();
        let bytes = spec.to_bytes(Format::Yaml).unwrap();
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert!(text.contains("cdiVersion: 0.5.0"), "{text}");
        assert_eq!(Format::sniff(&bytes), Format::Yaml);
        assert_eq!(Spec::from_slice(&bytes, None).unwrap(), spec);
    }

    #[test]
    fn unknown_fields_are_rejected() {
        let json = br#"{"cdiVersion":"0.3.0","kind":"a.com/b","devices":[],"bogus":1}"#;
        let err = Spec::from_slice(json, Some(Format::Json)).unwrap_err();
        assert!(err.to_string().contains("bogus"), "{err}");
        let yaml = b"cdiVersion: 0.3.0\nkind: a.com/b\ndevices:\n- name: x\n  containerEdits:\n    envv: [A=1]\n";
        let err = Spec::from_slice(yaml, None).unwrap_err();
        assert!(err.to_string().contains("envv"), "{err}");
    }

    #[test]
    fn format_from_path() {
        assert_eq!(
            Format::from_path(Path::new("/etc/cdi/a.json")),
            Some(Format::Json)
        );
        assert_eq!(Format::from_path(Path::new("a.yaml")), Some(Format::Yaml));
        assert_eq!(Format::from_path(Path::new("a.yml")), None);
        assert_eq!(Format::from_path(Path::new("json")), None);
    }

    #[test]
    fn intel_rdt_field_names() {
        let e = ContainerEdits {
            intel_rdt: Some(IntelRdt {
                clos_id: Some("c".into()),
                ..Default::default()
            }),
            additional_gids: vec![44],
            ..Default::default()
        };
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["intelRdt"]["closID"], "c");
        assert_eq!(v["additionalGids"][0], 44);
        assert!(v["intelRdt"].get("enableMonitoring").is_none());
    }
}
