//! Applying CDI edits to an OCI runtime spec (`config.json`), as a CDI-aware runtime does.
//!
//! The runtime wrapper uses this for runtimes without CDI support. It works on a
//! `serde_json::Value` so fields this crate does not model (newer OCI fields, annotations of other
//! tools) survive untouched, and it edits a copy that replaces the original only on success: a
//! failed injection never leaves a half-edited spec.

use std::collections::BTreeSet;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::PathBuf;

use serde_json::{json, Map, Value};

use crate::registry::Registry;
use crate::spec::{ContainerEdits, DeviceNode};
use crate::CdiError;

fn object<'a>(
    parent: &'a mut Map<String, Value>,
    key: &str,
) -> Result<&'a mut Map<String, Value>, CdiError> {
    let v = parent.entry(key).or_insert_with(|| json!({}));
    if v.is_null() {
        *v = json!({});
    }
    v.as_object_mut()
        .ok_or_else(|| CdiError::OciSpec(format!("{key} is not an object")))
}

fn array<'a>(
    parent: &'a mut Map<String, Value>,
    key: &str,
) -> Result<&'a mut Vec<Value>, CdiError> {
    let v = parent.entry(key).or_insert_with(|| json!([]));
    if v.is_null() {
        *v = json!([]);
    }
    v.as_array_mut()
        .ok_or_else(|| CdiError::OciSpec(format!("{key} is not an array")))
}

/// Linux `dev_t` split (glibc's encoding).
fn split_dev(dev: u64) -> (i64, i64) {
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    // Both parts are at most 32 bits wide: the reinterpretation is exact.
    (major.cast_signed(), minor.cast_signed())
}

/// Type, major, minor and mode of a node: as given when `type` and `major` are, else from lstat.
fn resolve_node(n: &DeviceNode) -> Result<(String, i64, i64, Option<u32>), CdiError> {
    let given_type = n.device_type.as_deref().filter(|t| !t.is_empty());
    if let Some(t) = given_type {
        if n.major.unwrap_or(0) != 0 || t == "p" {
            return Ok((
                t.into(),
                n.major.unwrap_or(0),
                n.minor.unwrap_or(0),
                n.file_mode,
            ));
        }
    }
    let host = PathBuf::from(n.host_path.as_deref().unwrap_or(&n.path));
    let bad = |message: String| CdiError::BadDeviceNode {
        path: n.path.clone(),
        host_path: host.clone(),
        message,
    };
    let meta = std::fs::symlink_metadata(&host).map_err(|e| bad(format!("cannot lstat: {e}")))?;
    let ft = meta.file_type();
    let found = if ft.is_char_device() {
        "c"
    } else if ft.is_block_device() {
        "b"
    } else if ft.is_fifo() {
        "p"
    } else {
        return Err(bad("not a device node".into()));
    };
    if let Some(t) = given_type {
        if t != found && !(t == "u" && found == "c") {
            return Err(bad(format!(
                "declared type {t} but the host node is {found}"
            )));
        }
    }
    let (major, minor) = split_dev(meta.rdev());
    let (major, minor) = if n.major.unwrap_or(0) != 0 {
        (n.major.unwrap_or(0), n.minor.unwrap_or(0))
    } else {
        (major, minor)
    };
    let mode = n.file_mode.or(Some(meta.mode() & 0o777));
    Ok((given_type.unwrap_or(found).into(), major, minor, mode))
}

fn apply_node(root: &mut Map<String, Value>, n: &DeviceNode) -> Result<(), CdiError> {
    let (typ, major, minor, mode) = resolve_node(n)?;
    let user = root
        .get("process")
        .and_then(|p| p.get("user"))
        .cloned()
        .unwrap_or(Value::Null);
    let mut dev = json!({"path": n.path, "type": typ, "major": major, "minor": minor});
    if let Some(mode) = mode {
        dev["fileMode"] = json!(mode);
    }
    match n.uid {
        Some(uid) => dev["uid"] = json!(uid),
        None => {
            if let Some(uid) = user.get("uid").filter(|v| v.is_u64()) {
                dev["uid"] = uid.clone();
            }
        }
    }
    match n.gid {
        Some(gid) => dev["gid"] = json!(gid),
        None => {
            if let Some(gid) = user.get("gid").filter(|v| v.is_u64()) {
                dev["gid"] = gid.clone();
            }
        }
    }
    let linux = object(root, "linux")?;
    let devices = array(linux, "devices")?;
    match devices
        .iter_mut()
        .find(|d| d.get("path").and_then(Value::as_str) == Some(&n.path))
    {
        Some(existing) => *existing = dev,
        None => devices.push(dev),
    }
    if matches!(typ.as_str(), "b" | "c" | "u") {
        let access = n
            .permissions
            .as_deref()
            .filter(|p| !p.is_empty())
            .unwrap_or("rwm");
        let rule_type = if typ == "b" { "b" } else { "c" };
        let rule = json!({"allow": true, "type": rule_type, "major": major, "minor": minor, "access": access});
        array(object(linux, "resources")?, "devices")?.push(rule);
    }
    Ok(())
}

/// `filepath.Clean`-like lexical cleaning, for mount ordering.
fn clean(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for p in path.split('/') {
        match p {
            "" | "." => {}
            ".." => {
                if parts.last().is_some_and(|l| *l != "..") {
                    parts.pop();
                } else if !path.starts_with('/') {
                    parts.push("..");
                }
            }
            p => parts.push(p),
        }
    }
    let joined = parts.join("/");
    if path.starts_with('/') {
        format!("/{joined}")
    } else if joined.is_empty() {
        ".".into()
    } else {
        joined
    }
}

fn mount_depth(m: &Value) -> usize {
    let dest = m.get("destination").and_then(Value::as_str).unwrap_or("");
    clean(dest).matches('/').count()
}

/// Applies one set of edits to `root` (the OCI spec object).
fn apply_to(root: &mut Map<String, Value>, e: &ContainerEdits) -> Result<(), CdiError> {
    if !e.env.is_empty() {
        let env = array(object(root, "process")?, "env")?;
        for entry in &e.env {
            let key = entry.split_once('=').map_or(entry.as_str(), |(k, _)| k);
            let same_key = |v: &Value| {
                v.as_str()
                    .is_some_and(|s| s.split_once('=').map_or(s, |(k, _)| k) == key)
            };
            match env.iter_mut().find(|v| same_key(v)) {
                Some(v) => *v = json!(entry),
                None => env.push(json!(entry)),
            }
        }
    }
    for n in &e.device_nodes {
        apply_node(root, n)?;
    }
    if !e.mounts.is_empty() {
        let mounts = array(root, "mounts")?;
        for m in &e.mounts {
            mounts.retain(|v| {
                v.get("destination").and_then(Value::as_str) != Some(&m.container_path)
            });
            let mut v = json!({"destination": m.container_path, "source": m.host_path});
            if !m.options.is_empty() {
                v["options"] = json!(m.options);
            }
            if let Some(t) = &m.mount_type {
                v["type"] = json!(t);
            }
            mounts.push(v);
        }
    }
    for h in &e.hooks {
        let mut v = json!({"path": h.path});
        if !h.args.is_empty() {
            v["args"] = json!(h.args);
        }
        // A hook without `env` would run with whatever env the runtime gives it; older runc
        // gave a createContainer hook the container's (CVE-2025-23266: an image's LD_PRELOAD
        // ran as root on the host). Every hook we write gets an explicit env: PATH only.
        v["env"] = if h.env.is_empty() {
            json!(crate::edits::DEFAULT_HOOK_ENV)
        } else {
            json!(h.env)
        };
        if let Some(t) = h.timeout {
            v["timeout"] = json!(t);
        }
        array(object(root, "hooks")?, &h.hook_name)?.push(v);
    }
    if !e.additional_gids.is_empty() {
        let gids = array(object(object(root, "process")?, "user")?, "additionalGids")?;
        for gid in e.additional_gids.iter().filter(|g| **g != 0) {
            if !gids.iter().any(|v| v.as_u64() == Some(u64::from(*gid))) {
                gids.push(json!(gid));
            }
        }
    }
    if let Some(rdt) = &e.intel_rdt {
        let mut v = serde_json::to_value(rdt).map_err(|e| CdiError::Serialize(e.to_string()))?;
        if let (Some(obj), Some(old)) = (
            v.as_object_mut(),
            root.get("linux").and_then(|l| l.get("intelRdt")),
        ) {
            if let Some(old) = old.as_object() {
                for (k, val) in old {
                    obj.entry(k.clone()).or_insert(val.clone());
                }
            }
        }
        object(root, "linux")?.insert("intelRdt".into(), v);
    }
    for n in &e.net_devices {
        object(object(root, "linux")?, "netDevices")?
            .insert(n.host_interface_name.clone(), json!({"name": n.name}));
    }
    Ok(())
}

fn sort_mounts(root: &mut Map<String, Value>) {
    if let Some(Value::Array(mounts)) = root.get_mut("mounts") {
        mounts.sort_by_key(mount_depth);
    }
}

/// Applies `edits` (e.g. from [`crate::edits_for`]) to `oci`; on error `oci` is unchanged.
pub fn apply_edits(oci: &mut Value, edits: &ContainerEdits) -> Result<(), CdiError> {
    let mut copy = oci.clone();
    let root = copy
        .as_object_mut()
        .ok_or_else(|| CdiError::OciSpec("the document is not a JSON object".into()))?;
    apply_to(root, edits)?;
    sort_mounts(root);
    *oci = copy;
    Ok(())
}

/// Resolves qualified `names` in `registry` and applies them in request order (each spec's common
/// edits once, before its first device). Any unknown name: [`CdiError::Unresolvable`] and nothing
/// applied; any other error also leaves `oci` unchanged.
pub fn apply_devices(
    oci: &mut Value,
    registry: &Registry,
    names: &[String],
) -> Result<(), CdiError> {
    let resolved = registry.resolve(names)?;
    let mut copy = oci.clone();
    let root = copy
        .as_object_mut()
        .ok_or_else(|| CdiError::OciSpec("the document is not a JSON object".into()))?;
    let mut specs_done: BTreeSet<PathBuf> = BTreeSet::new();
    for dev in resolved {
        if specs_done.insert(dev.spec.path.clone()) {
            apply_to(root, &dev.spec.spec.container_edits)?;
        }
        apply_to(root, &dev.device().container_edits)?;
    }
    sort_mounts(root);
    *oci = copy;
    Ok(())
}

#[cfg(test)]
#[path = "apply_tests.rs"]
mod tests;
