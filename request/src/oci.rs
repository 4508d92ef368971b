//! Reading the parts of an OCI `config.json` that carry a device request.
//!
//! The config is container-controlled, so every access is shape-checked and bounded (see
//! [`super::limits`]); nothing here allocates per entry beyond a borrowed map of the environment.

use std::collections::HashMap;

use serde_json::Value;

use super::error::{preview, RequestError};
use super::limits::{self, MAX_ANNOTATIONS, MAX_ENV_ENTRIES, MAX_MOUNTS, MAX_VALUE_BYTES};

/// Annotation key prefix of CDI device requests.
pub const CDI_ANNOTATION_PREFIX: &str = "cdi.k8s.io/";
/// Mount destination prefix of device lists passed as volume mounts.
pub const DEVICE_LIST_MOUNT_ROOT: &str = "/var/run/nvidia-container-devices";

/// The container environment: last value wins for a repeated key, like the runtime does.
#[derive(Debug, Default)]
pub(crate) struct Env<'a> {
    vars: HashMap<&'a str, &'a str>,
}

impl<'a> Env<'a> {
    /// Reads `process.env`, enforcing the limits and `KEY=VALUE` shape.
    pub(crate) fn from_config(config: &'a Value) -> Result<Self, RequestError> {
        let Some(env) = config.get("process").and_then(|p| p.get("env")) else {
            return Ok(Env::default());
        };
        if env.is_null() {
            return Ok(Env::default());
        }
        let entries = env
            .as_array()
            .ok_or_else(|| RequestError::invalid_config("process.env", "is not an array"))?;
        if entries.len() > MAX_ENV_ENTRIES {
            return Err(RequestError::limit(
                format!("process.env ({} entries)", entries.len()),
                format!("{MAX_ENV_ENTRIES} entries"),
            ));
        }
        let mut vars = HashMap::with_capacity(entries.len());
        for (index, entry) in entries.iter().enumerate() {
            let entry = entry.as_str().ok_or_else(|| {
                RequestError::invalid_config(&format!("process.env[{index}]"), "is not a string")
            })?;
            check_value_size(&format!("process.env[{index}]"), entry)?;
            let (key, value) =
                entry
                    .split_once('=')
                    .ok_or_else(|| RequestError::EnvEntryWithoutEquals {
                        index,
                        entry: preview(entry),
                    })?;
            if key.is_empty() {
                return Err(RequestError::invalid_config(
                    &format!("process.env[{index}]"),
                    format!("({:?}) has an empty variable name", preview(entry)),
                ));
            }
            vars.insert(key, value);
        }
        Ok(Env { vars })
    }

    pub(crate) fn get(&self, key: &str) -> Option<&'a str> {
        self.vars.get(key).copied()
    }

    /// The value of `key` when set and not empty.
    pub(crate) fn non_empty(&self, key: &str) -> Option<&'a str> {
        self.get(key).filter(|v| !v.is_empty())
    }

    /// All `(key, value)` pairs whose key starts with `prefix`, sorted by key.
    pub(crate) fn with_prefix(&self, prefix: &str) -> Vec<(&'a str, &'a str)> {
        let mut out: Vec<_> = self
            .vars
            .iter()
            .filter(|(k, _)| k.starts_with(prefix))
            .map(|(k, v)| (*k, *v))
            .collect();
        out.sort_unstable();
        out
    }
}

fn check_value_size(what: &str, value: &str) -> Result<(), RequestError> {
    if value.len() > MAX_VALUE_BYTES {
        return Err(RequestError::limit(
            format!("{what} ({} bytes)", value.len()),
            limits::bytes(MAX_VALUE_BYTES),
        ));
    }
    Ok(())
}

/// Whether the container is privileged: `CAP_SYS_ADMIN` in `process.capabilities.bounding`.
/// Anything malformed counts as unprivileged (the safe side).
pub(crate) fn is_privileged(config: &Value) -> bool {
    config
        .get("process")
        .and_then(|p| p.get("capabilities"))
        .and_then(|c| c.get("bounding"))
        .and_then(Value::as_array)
        .is_some_and(|caps| caps.iter().any(|c| c.as_str() == Some("CAP_SYS_ADMIN")))
}

/// `cdi.k8s.io/*` annotations as `(key, value)`, sorted by key.
pub(crate) fn cdi_annotations(config: &Value) -> Result<Vec<(&str, &str)>, RequestError> {
    let Some(annotations) = config.get("annotations") else {
        return Ok(Vec::new());
    };
    if annotations.is_null() {
        return Ok(Vec::new());
    }
    let map = annotations
        .as_object()
        .ok_or_else(|| RequestError::invalid_config("annotations", "is not an object"))?;
    if map.len() > MAX_ANNOTATIONS {
        return Err(RequestError::limit(
            format!("annotations ({} entries)", map.len()),
            format!("{MAX_ANNOTATIONS} entries"),
        ));
    }
    let mut out = Vec::new();
    for (key, value) in map
        .iter()
        .filter(|(k, _)| k.starts_with(CDI_ANNOTATION_PREFIX))
    {
        let field = format!("annotations[{:?}]", preview(key));
        let value = value
            .as_str()
            .ok_or_else(|| RequestError::invalid_config(&field, "is not a string"))?;
        check_value_size(&field, value)?;
        out.push((key.as_str(), value));
    }
    out.sort_unstable();
    Ok(out)
}

/// Device ids passed as `/dev/null` mounts under [`DEVICE_LIST_MOUNT_ROOT`], in mount order.
/// The id is the rest of the destination path (`GPU-…`, `cdi/nvidia.com/gpu=0`, `MIG-GPU-…/1/0`).
pub(crate) fn mount_device_ids(config: &Value) -> Result<Vec<&str>, RequestError> {
    let Some(mounts) = config.get("mounts") else {
        return Ok(Vec::new());
    };
    if mounts.is_null() {
        return Ok(Vec::new());
    }
    let mounts = mounts
        .as_array()
        .ok_or_else(|| RequestError::invalid_config("mounts", "is not an array"))?;
    if mounts.len() > MAX_MOUNTS {
        return Err(RequestError::limit(
            format!("mounts ({} entries)", mounts.len()),
            format!("{MAX_MOUNTS} entries"),
        ));
    }
    let mut ids = Vec::new();
    for (index, mount) in mounts.iter().enumerate() {
        let Some(dest) = mount.get("destination").and_then(Value::as_str) else {
            continue;
        };
        let Some(rest) = dest
            .strip_prefix(DEVICE_LIST_MOUNT_ROOT)
            .and_then(|r| r.strip_prefix('/'))
        else {
            continue;
        };
        check_value_size(&format!("mounts[{index}].destination"), dest)?;
        // Only a /dev/null bind counts: an image cannot forge one through its own layers.
        if mount.get("source").and_then(Value::as_str) != Some("/dev/null") {
            continue;
        }
        let id = rest.trim_end_matches('/');
        if !id.is_empty() {
            ids.push(id);
        }
    }
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn env_last_wins_and_shape_errors() {
        let c = json!({"process": {"env": ["A=1", "B=x=y", "A=2", "E="]}});
        let env = Env::from_config(&c).unwrap();
        assert_eq!(env.get("A"), Some("2"));
        assert_eq!(env.get("B"), Some("x=y"));
        assert_eq!(env.get("E"), Some(""));
        assert_eq!(env.non_empty("E"), None);
        assert_eq!(env.get("Z"), None);

        let err = Env::from_config(&json!({"process": {"env": ["A=1", "NOEQUALS"]}})).unwrap_err();
        assert!(
            err.to_string()
                .contains("process.env[1] (\"NOEQUALS\") has no '='"),
            "{err}"
        );
        let err = Env::from_config(&json!({"process": {"env": ["=x"]}})).unwrap_err();
        assert!(err.to_string().contains("empty variable name"), "{err}");
        let err = Env::from_config(&json!({"process": {"env": [1]}})).unwrap_err();
        assert!(
            err.to_string().contains("process.env[0] is not a string"),
            "{err}"
        );
        let err = Env::from_config(&json!({"process": {"env": "A=1"}})).unwrap_err();
        assert!(
            err.to_string().contains("process.env is not an array"),
            "{err}"
        );
        assert!(Env::from_config(&json!({})).unwrap().get("A").is_none());
        assert!(Env::from_config(&json!({"process": {"env": null}}))
            .unwrap()
            .get("A")
            .is_none());
    }

    #[test]
    fn env_limits() {
        let many: Vec<String> = (0..=MAX_ENV_ENTRIES).map(|i| format!("V{i}=1")).collect();
        let err = Env::from_config(&json!({"process": {"env": many}})).unwrap_err();
        assert!(matches!(err, RequestError::LimitExceeded { .. }));
        assert!(err.to_string().contains("10000 entries"), "{err}");

        let big = format!("X={}", "a".repeat(MAX_VALUE_BYTES));
        let err = Env::from_config(&json!({"process": {"env": [big]}})).unwrap_err();
        assert!(err.to_string().contains("limit of 1 MiB"), "{err}");
    }

    #[test]
    fn privileged_only_with_cap_sys_admin_in_bounding() {
        assert!(is_privileged(
            &json!({"process": {"capabilities": {"bounding": ["CAP_CHOWN", "CAP_SYS_ADMIN"]}}})
        ));
        assert!(!is_privileged(
            &json!({"process": {"capabilities": {"effective": ["CAP_SYS_ADMIN"]}}})
        ));
        assert!(!is_privileged(
            &json!({"process": {"capabilities": {"bounding": "CAP_SYS_ADMIN"}}})
        ));
        assert!(!is_privileged(&json!({})));
    }

    #[test]
    fn annotations_sorted_and_filtered() {
        let c =
            json!({"annotations": {"cdi.k8s.io/z": "b/c=1", "other": 5, "cdi.k8s.io/a": "b/c=0"}});
        assert_eq!(
            cdi_annotations(&c).unwrap(),
            vec![("cdi.k8s.io/a", "b/c=0"), ("cdi.k8s.io/z", "b/c=1")]
        );
        let err = cdi_annotations(&json!({"annotations": {"cdi.k8s.io/a": 1}})).unwrap_err();
        assert!(err.to_string().contains("is not a string"), "{err}");
        assert!(cdi_annotations(&json!({"annotations": []})).is_err());
    }

    #[test]
    fn mount_ids_need_dev_null_source() {
        let c = json!({"mounts": [
            {"destination": "/var/run/nvidia-container-devices/GPU-a", "source": "/dev/null"},
            {"destination": "/var/run/nvidia-container-devices/GPU-b", "source": "/tmp/x"},
            {"destination": "/var/run/nvidia-container-devices/cdi/nvidia.com/gpu=0", "source": "/dev/null"},
            {"destination": "/var/run/nvidia-container-devicesX/GPU-c", "source": "/dev/null"},
            {"destination": "/var/run/nvidia-container-devices/", "source": "/dev/null"},
            {"destination": "/proc", "source": "proc"}
        ]});
        assert_eq!(
            mount_device_ids(&c).unwrap(),
            vec!["GPU-a", "cdi/nvidia.com/gpu=0"]
        );
        assert!(mount_device_ids(&json!({"mounts": {}})).is_err());
    }
}
