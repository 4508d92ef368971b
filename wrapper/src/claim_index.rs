//! DRA claims on containerd 1.6: the CDI IDs of the claims a CRI container uses, from
//! gpuhook-dra-plugin's claim index (`dra/src/podindex.rs` writes it; dra/README.md, "The claim
//! index").
//!
//! A 1.31+ kubelet passes a claim's CDI IDs only in `ContainerConfig.CDI_devices`, which
//! containerd 1.6 drops. The plugin records, at `NodePrepareResources`,
//! `<dir>/<pod UID>.json` = `{"claims": {"<claim UID>": {"<container>": ["<CDI ID>", …]}}}`.
//! For a spec with containerd's CRI annotations (`io.kubernetes.cri.container-type` =
//! `container`, `io.kubernetes.cri.sandbox-uid`, `io.kubernetes.cri.container-name`: set by
//! containerd from the kubelet's CRI request, never by the pod — containerd 1.6 writes them after
//! any `pod_annotations` pass-through, `container_create_linux.go` `containerSpec`; dra/README.md,
//! "The claim index") the wrapper reads that file and
//! resolves the IDs exactly as the names of a container's `cdi.k8s.io/*` annotation (same spec
//! dirs, same rules): they are added to the spec it decides on as one more container annotation,
//! [`KEY`] (never written to the bundle).
//!
//! Trust: the file must be a regular file owned by root and not group/world-writable (the
//! plugin writes it 0600 in a 0700 dir); the UID and container name are checked to be plain
//! names before the path is built. No entry, no file or no dir: nothing is added, nothing
//! refused.

use std::borrow::Cow;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use gpuhook_node::bounded::read_bounded;
use gpuhook_request::provenance::CRI_CONTAINER_TYPE;
use gpuhook_request::RequestPolicy;
use serde_json::Value;

/// The annotation the index's IDs are handed to the request parser under.
pub const KEY: &str = "cdi.k8s.io/gpuhook-dra-claim-index";
/// containerd's pod UID annotation (containerd 1.6: `pkg/cri/annotations`, `SandboxUID`).
pub const CRI_SANDBOX_UID: &str = "io.kubernetes.cri.sandbox-uid";
/// containerd's container name annotation (`ContainerName`).
pub const CRI_CONTAINER_NAME: &str = "io.kubernetes.cri.container-name";
/// Bound on an index file.
const MAX_INDEX_BYTES: u64 = 1 << 20;

fn annotation<'a>(spec: &'a Value, key: &str) -> Option<&'a str> {
    spec.get("annotations")?.get(key)?.as_str()
}

fn plain(s: &str, max: usize, ok: impl Fn(u8) -> bool) -> bool {
    !s.is_empty() && s.len() <= max && s.bytes().all(ok)
}

/// The index file of the CRI container `spec` and its container name; `None` when the spec is
/// not a CRI container's or its annotations are not plain names.
pub fn index_file(dir: &Path, spec: &Value) -> Option<(PathBuf, String)> {
    if annotation(spec, CRI_CONTAINER_TYPE) != Some("container") {
        return None;
    }
    let uid = annotation(spec, CRI_SANDBOX_UID)?;
    let name = annotation(spec, CRI_CONTAINER_NAME)?;
    let uid_ok = plain(uid, 64, |b| b.is_ascii_alphanumeric() || b == b'-');
    // A container name is a DNS label (RFC 1123).
    let name_ok = plain(name, 63, |b| {
        b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'
    });
    if !(uid_ok && name_ok) {
        tracing::warn!(uid = %uid.escape_debug(), container = %name.escape_debug(), "CRI annotations are not plain names; claim index not read");
        return None;
    }
    Some((dir.join(format!("{uid}.json")), name.to_string()))
}

/// The CDI IDs the index holds for container `name` in `path` (every claim, each ID once).
fn ids_in(path: &Path, name: &str) -> Result<Vec<String>, String> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e.to_string()),
    };
    if !meta.file_type().is_file() || meta.uid() != 0 || meta.mode() & 0o022 != 0 {
        return Err("not a regular file owned by root and writable only by root".into());
    }
    let bytes = read_bounded(path, MAX_INDEX_BYTES).map_err(|e| e.to_string())?;
    let v: Value = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
    let claims = v.get("claims").and_then(Value::as_object);
    let mut out: Vec<String> = Vec::new();
    for ids in claims
        .into_iter()
        .flatten()
        .filter_map(|(_, c)| c.get(name))
    {
        for id in ids
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            if !out.iter().any(|o| o == id) {
                out.push(id.to_string());
            }
        }
    }
    Ok(out)
}

/// `spec` with the index's IDs for its container as annotation [`KEY`] (borrowed unchanged when
/// there are none); `policy` then admits that key as a container annotation.
pub fn with_claims<'a>(dir: &Path, spec: &'a Value, policy: &mut RequestPolicy) -> Cow<'a, Value> {
    let Some((path, name)) = index_file(dir, spec) else {
        return Cow::Borrowed(spec);
    };
    let ids = match ids_in(&path, &name) {
        Ok(ids) if ids.is_empty() => return Cow::Borrowed(spec),
        Ok(ids) => ids,
        Err(e) => {
            tracing::warn!(file = %path.display(), error = %e, "claim index ignored");
            return Cow::Borrowed(spec);
        }
    };
    let mut spec = spec.clone();
    if let Some(a) = spec.get_mut("annotations").and_then(Value::as_object_mut) {
        a.insert(KEY.to_string(), Value::String(ids.join(",")));
    }
    policy.pod_cdi_keys.remove(KEY);
    Cow::Owned(spec)
}

#[cfg(test)]
#[path = "claim_index_tests.rs"]
mod tests;
