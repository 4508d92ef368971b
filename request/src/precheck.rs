//! The start path's cheap pre-check: is this a GPU container at all?
//!
//! Every container start on the node runs the hook (or the wrapper), and almost none ask for a
//! GPU. These checks only borrow from `config.json`, allocate nothing and never fail, so a
//! non-GPU container costs no discovery and is never failed for a malformed field it does not
//! use. A `true` is then confirmed by [`crate::ContainerRequest::read`], the strict reader.

use serde_json::Value;

use crate::cdi_name::NVIDIA_GPU_MPS_KIND;
use crate::limits::{MAX_ANNOTATIONS, MAX_ID_LIST_BYTES};
use crate::oci::{self, CDI_ANNOTATION_PREFIX, DEVICE_LIST_MOUNT_ROOT};
use crate::policy::RequestPolicy;

/// Cheap pre-check for the container start path: `false` means [`crate::parse`] would find nothing to do
/// (or an error a non-GPU container must not be failed for), so the hook can exit without discovery.
/// It only borrows from `config` and allocates nothing.
pub fn is_gpu_container(config: &Value, policy: &RequestPolicy) -> bool {
    let kind = policy.cdi_kind.as_str();
    let of_kind = |name: &str, kind: &str| {
        name.trim()
            .strip_prefix(kind)
            .is_some_and(|r| r.starts_with('='))
    };
    // MPS shares are GPUs too: the hook resolves them through the CDI spec directories.
    let ours = |name: &str| of_kind(name, kind) || of_kind(name, NVIDIA_GPU_MPS_KIND);
    if let Some(map) = config.get("annotations").and_then(Value::as_object) {
        let cdi = map
            .iter()
            .filter(|(k, _)| k.starts_with(CDI_ANNOTATION_PREFIX));
        if cdi
            .filter_map(|(k, v)| Some((k, v.as_str()?)))
            .any(|(k, v)| v.split(',').any(|n| ours(n) && policy.admits(k, n)))
        {
            return true;
        }
    }
    if policy.accept_device_list_as_volume_mounts {
        if let Some(mounts) = config.get("mounts").and_then(Value::as_array) {
            let has = mounts.iter().any(|m| {
                m.get("source").and_then(Value::as_str) == Some("/dev/null")
                    && m.get("destination")
                        .and_then(Value::as_str)
                        .is_some_and(|d| {
                            d.strip_prefix(DEVICE_LIST_MOUNT_ROOT)
                                .and_then(|r| r.strip_prefix('/'))
                                .is_some_and(|r| !r.trim_end_matches('/').is_empty())
                        })
            });
            if has {
                return true;
            }
        }
    }
    let (mut visible, mut cuda, mut require_cuda) = (None, None, None);
    for entry in config
        .get("process")
        .and_then(|p| p.get("env"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let Some((k, v)) = entry.as_str().and_then(|e| e.split_once('=')) else {
            continue;
        };
        match k {
            "NVIDIA_VISIBLE_DEVICES" => visible = Some(v),
            "CUDA_VERSION" => cuda = Some(v),
            "NVIDIA_REQUIRE_CUDA" => require_cuda = Some(v),
            _ => {}
        }
    }
    if !(policy.accept_envvar_when_unprivileged || oci::is_privileged(config)) {
        return false;
    }
    match visible {
        Some(v) => {
            let mut tokens = v.split(',').map(str::trim).filter(|t| !t.is_empty());
            !tokens.clone().any(|t| t.eq_ignore_ascii_case("void")) && tokens.next().is_some()
        }
        None => cuda.is_some_and(|c| !c.is_empty()) && require_cuda.unwrap_or_default().is_empty(),
    }
}

/// Whether the container's `cdi.k8s.io/*` annotations name a device the policy admits, of any
/// kind, or are malformed (so that [`crate::ContainerRequest::read`] reports them): the wrapper,
/// the only CDI consumer on containerd 1.6, injects every kind.
pub fn has_cdi_request(config: &Value, policy: &RequestPolicy) -> bool {
    let Some(annotations) = config.get("annotations").filter(|a| !a.is_null()) else {
        return false;
    };
    let Some(map) = annotations.as_object() else {
        return true;
    };
    if map.len() > MAX_ANNOTATIONS {
        return true;
    }
    let mut cdi = map
        .iter()
        .filter(|(k, _)| k.starts_with(CDI_ANNOTATION_PREFIX));
    cdi.any(|(key, value)| match value.as_str() {
        None => true,
        Some(v) if v.len() > MAX_ID_LIST_BYTES => true,
        Some(v) => v
            .split(',')
            .map(str::trim)
            .any(|n| !n.is_empty() && policy.admits(key, n)),
    })
}
