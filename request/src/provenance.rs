//! Where a container's `cdi.k8s.io/*` annotations come from: a pod annotation is not a GPU grant.
//!
//! Under Kubernetes, a device plugin grants devices through its `Allocate` response; kubelet puts
//! the response's annotations into the CRI *container* config (never into the pod's), and the pod
//! author cannot set those. Pod annotations are the pod author's: honouring
//! `cdi.k8s.io/x: nvidia.com/gpu=all` from them would let anyone on the runtime class take every
//! GPU, past the device plugin and `accept-envvar-when-unprivileged = false`.
//!
//! What containerd puts in `config.json` (1.6 and 1.7, `pkg/cri/server/container_create_linux.go`,
//! `containerSpec`): first the pod annotations listed in the runtime's `pod_annotations`, then the
//! container annotations listed in `container_annotations`, both under their own keys (a container
//! annotation replaces a pod annotation of the same key), then `io.kubernetes.cri.container-type =
//! container` and `io.kubernetes.cri.sandbox-id = <pod sandbox id>`. The sandbox (pause)
//! container's spec (`sandbox_run_linux.go`, `sandboxContainerSpec`) gets the same
//! `pod_annotations` and `container-type = sandbox`. Its bundle is a sibling of the container's
//! (`<state>/io.containerd.runtime.v2.task/<namespace>/<id>`).
//!
//! So the rule: a `cdi.k8s.io/*` annotation of a CRI container is a **pod annotation** when the
//! pod sandbox's `config.json` has the same key with the same value (then it came through
//! `pod_annotations`); every annotation of a sandbox container is one; when the sandbox's spec
//! cannot be read, all of them are (fail closed). Pod annotations name devices only when the admin
//! allow-lists them (`allow-cdi-devices-from-pod-annotations`, globs of qualified names); the rest
//! are ignored with a log line. A container not made by the CRI plugin (no `container-type`:
//! `ctr`, nerdctl, podman) got its annotations from whoever runs the runtime, root: honoured.
//! The sibling spec is read only when a CRI container has `cdi.k8s.io/*` annotations at all.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use gpuhook_node::bounded::{preview, preview_joined, read_bounded, MAX_OCI_CONFIG_BYTES};
use serde_json::Value;

use super::oci::CDI_ANNOTATION_PREFIX;
use super::policy::RequestPolicy;

/// `container` or `sandbox`, set by containerd's CRI plugin on every spec it makes.
pub const CRI_CONTAINER_TYPE: &str = "io.kubernetes.cri.container-type";
/// The pod sandbox's id, set by the CRI plugin on a container's spec.
pub const CRI_SANDBOX_ID: &str = "io.kubernetes.cri.sandbox-id";

/// Most ignored pod-annotation devices a log line lists (the rest are counted).
const MAX_IGNORED_SHOWN: usize = 16;

/// Longest sandbox id accepted (containerd's are 64 hex digits).
const MAX_SANDBOX_ID: usize = 128;

/// Whether `name` (a qualified CDI name) matches an allow-list entry (`*` and `?` globs).
pub fn allowed(patterns: &[String], name: &str) -> bool {
    patterns.iter().any(|p| glob_match(p, name.trim()))
}

/// Go `filepath.Match`-style matching of `*` and `?` within one path segment.
pub fn glob_match(pattern: &str, path: &str) -> bool {
    let (p, s): (Vec<char>, Vec<char>) = (pattern.chars().collect(), path.chars().collect());
    fn go(p: &[char], s: &[char]) -> bool {
        match p.first() {
            None => s.is_empty(),
            Some('*') => (0..=s.len())
                .take_while(|&i| i == 0 || s[i - 1] != '/')
                .any(|i| go(&p[1..], &s[i..])),
            Some('?') => s.first().is_some_and(|c| *c != '/') && go(&p[1..], &s[1..]),
            Some(c) => s.first() == Some(c) && go(&p[1..], &s[1..]),
        }
    }
    go(&p, &s)
}

fn cdi_entries(config: &Value) -> Vec<(&str, &str)> {
    config
        .get("annotations")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter(|(k, _)| k.starts_with(CDI_ANNOTATION_PREFIX))
        .map(|(k, v)| (k.as_str(), v.as_str().unwrap_or_default()))
        .collect()
}

/// Why the pod sandbox's annotations could not be read (the container's are then all taken for
/// pod annotations: fail closed).
#[derive(Debug, thiserror::Error)]
enum SandboxError {
    #[error("{CRI_SANDBOX_ID} {0:?} is not a sandbox id")]
    BadId(String),
    #[error("the bundle has no parent directory")]
    NoParent,
    #[error(transparent)]
    Read(#[from] gpuhook_node::bounded::BoundedReadError),
    /// The parser's error is in the message only, not a `source` too (printed once).
    #[error("the pod sandbox's config.json: {0}")]
    Parse(serde_json::Error),
}

/// The sandbox's annotations, read from its bundle beside `bundle`.
fn sandbox_annotations(bundle: &Path, id: &str) -> Result<Value, SandboxError> {
    let valid = !id.is_empty()
        && id.len() <= MAX_SANDBOX_ID
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        && id != "."
        && id != "..";
    if !valid {
        return Err(SandboxError::BadId(preview(id)));
    }
    let dir: PathBuf = bundle.parent().ok_or(SandboxError::NoParent)?.join(id);
    let bytes = read_bounded(&dir.join("config.json"), MAX_OCI_CONFIG_BYTES)?;
    let spec: Value = serde_json::from_slice(&bytes).map_err(SandboxError::Parse)?;
    Ok(spec.get("annotations").cloned().unwrap_or(Value::Null))
}

/// Keys of the `cdi.k8s.io/*` annotations of `config` that came from the pod (see the module
/// doc). Reads the sandbox's spec only for a CRI container with such annotations.
pub fn pod_annotation_keys(config: &Value, bundle: &Path) -> BTreeSet<String> {
    let entries = cdi_entries(config);
    if entries.is_empty() {
        return BTreeSet::new();
    }
    let annotation = |k: &str| config.get("annotations").and_then(|a| a.get(k));
    let all = || entries.iter().map(|(k, _)| k.to_string()).collect();
    match annotation(CRI_CONTAINER_TYPE).map(|v| v.as_str()) {
        None => BTreeSet::new(),
        Some(Some("container")) => {
            let id = annotation(CRI_SANDBOX_ID)
                .and_then(Value::as_str)
                .unwrap_or_default();
            match sandbox_annotations(bundle, id) {
                Ok(pod) => entries
                    .iter()
                    .filter(|(k, v)| pod.get(*k).and_then(Value::as_str) == Some(*v))
                    .map(|(k, _)| k.to_string())
                    .collect(),
                Err(reason) => {
                    tracing::warn!(
                        reason = %preview(&reason.to_string()),
                        "cannot tell pod from container CDI annotations; treating all as pod annotations"
                    );
                    all()
                }
            }
        }
        // A sandbox's annotations are all the pod's; an unknown type: fail closed.
        Some(_) => all(),
    }
}

impl RequestPolicy {
    /// This policy for the container of `config` in `bundle`: marks its pod annotations
    /// ([`pod_annotation_keys`]) and logs each device name they ask for that the
    /// allow-list refuses (those are ignored).
    pub fn for_container(&self, config: &Value, bundle: &std::path::Path) -> RequestPolicy {
        let keys = pod_annotation_keys(config, bundle);
        let mut policy = self.clone();
        if keys.is_empty() {
            return policy;
        }
        let annotations = config.get("annotations");
        let mut ignored: Vec<String> = Vec::new();
        for key in &keys {
            let value = annotations
                .and_then(|a| a.get(key))
                .and_then(Value::as_str)
                .unwrap_or_default();
            let names = value.split(',').map(str::trim).filter(|n| !n.is_empty());
            ignored.extend(
                names
                    .filter(|n| !allowed(&self.pod_cdi_allow, n))
                    .map(|n| format!("{key}: {n}")),
            );
        }
        if !ignored.is_empty() {
            // One line per container, however many names a pod author wrote.
            tracing::warn!(
                target: "gpuhook::decision",
                outcome = "ignored",
                devices = %preview_joined(&ignored, MAX_IGNORED_SHOWN, ","),
                reason = "a pod annotation is not a device grant: request devices through \
                          the device plugin, or allow-list them in \
                          allow-cdi-devices-from-pod-annotations",
                "decision"
            );
        }
        policy.pod_cdi_keys = keys;
        policy
    }

    /// Whether the name `name` of annotation `key` is a request (not a refused pod annotation).
    pub fn admits(&self, key: &str, name: &str) -> bool {
        !self.pod_cdi_keys.contains(key) || allowed(&self.pod_cdi_allow, name)
    }
}

#[cfg(test)]
#[path = "provenance_tests.rs"]
mod tests;
