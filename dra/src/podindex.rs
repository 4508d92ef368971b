//! The claim index: which containers of which pod use a prepared claim's CDI devices, for
//! gpuhook-runtime on containerd 1.6.
//!
//! Kubelets 1.31+ pass a claim's CDI IDs only in the CRI field `ContainerConfig.CDI_devices`,
//! which containerd 1.6 drops (dra/README.md, "How the kubelet hands CDI IDs to the runtime").
//! So at `NodePrepareResources` the plugin reads each pod of the claim's `status.reservedFor`
//! and maps the claim to the containers that use it, as the kubelet's DRA manager does
//! (`GetResources`: `container.resources.claims[].name` → the pod's `spec.resourceClaims[]`
//! entry → the claim name, `status.resourceClaimStatuses[].resourceClaimName` for a template or
//! `resourceClaimName`; a claim entry's `request` narrows it to that request's devices). It
//! writes `<plugin dir>/pods/<pod UID>.json` (root only, 0600, in a 0700 dir):
//! `{"claims": {"<claim UID>": {"<container name>": ["<CDI ID>", …]}}}`.
//! Pods that join or leave the claim later (the kubelet prepares a claim once per node) are
//! followed by `claimwatch.rs`. gpuhook-runtime (`wrapper/src/claim_index.rs`) reads it for a CRI container by the
//! `io.kubernetes.cri.sandbox-uid` and `io.kubernetes.cri.container-name` annotations.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::checkpoint::PreparedDevice;
use crate::error::DraError;

/// The index's directory name beside the checkpoint.
pub const DIR_NAME: &str = "pods";
/// Bound on one index file read back.
const MAX_INDEX_BYTES: u64 = 1 << 20;
/// Bound on the entries of the index dir read in one walk (a node runs at most a few hundred
/// pods; the kubelet's default `maxPods` is 110).
pub const MAX_INDEX_FILES: usize = 4096;

/// container name → CDI IDs.
pub type ContainerIds = BTreeMap<String, Vec<String>>;

/// One pod's index file.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodIndex {
    /// claim UID → its containers in this pod.
    pub claims: BTreeMap<String, ContainerIds>,
}

/// Bound on the pods of one claim's `status.reservedFor` followed (the API server allows 256:
/// `ResourceClaimReservedForMaxSize`).
pub const MAX_RESERVED: usize = 256;

/// What one [`Driver::reindex`] changed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Reindexed {
    /// Pods newly indexed (or found not to use the claim).
    pub added: Vec<String>,
    /// Pods whose entry for the claim was removed (no longer in `reservedFor`).
    pub removed: Vec<String>,
    /// Pods of `reservedFor` that could not be read (tried again next time), with the error.
    pub failed: Vec<(String, String)>,
}

/// Serializes read-modify-write of index files (two claims of one pod prepare concurrently).
static LOCK: Mutex<()> = Mutex::new(());

#[derive(Debug, Deserialize)]
struct Pod {
    metadata: Meta,
    #[serde(default)]
    spec: PodSpec,
    #[serde(default)]
    status: PodStatus,
}

#[derive(Debug, Deserialize)]
struct Meta {
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    uid: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodSpec {
    #[serde(default)]
    containers: Vec<Container>,
    #[serde(default)]
    init_containers: Vec<Container>,
    #[serde(default)]
    resource_claims: Vec<PodClaim>,
}

#[derive(Debug, Deserialize)]
struct Container {
    name: String,
    #[serde(default)]
    resources: Resources,
}

#[derive(Debug, Default, Deserialize)]
struct Resources {
    #[serde(default)]
    claims: Vec<ContainerClaim>,
}

#[derive(Debug, Deserialize)]
struct ContainerClaim {
    name: String,
    #[serde(default)]
    request: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodClaim {
    name: String,
    #[serde(default)]
    resource_claim_name: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodStatus {
    #[serde(default)]
    resource_claim_statuses: Vec<PodClaim>,
}

fn invalid(value: String, why: impl Into<String>) -> DraError {
    DraError::Invalid {
        what: "Pod",
        value,
        why: why.into(),
    }
}

/// The containers of `pod` (API JSON; must be `namespace`'s pod `pod_uid`) that use claim
/// `claim_name`, each with the CDI IDs of `devices` it gets.
pub fn containers_of_claim(
    pod: Value,
    namespace: &str,
    pod_uid: &str,
    claim_name: &str,
    devices: &[PreparedDevice],
) -> Result<ContainerIds, DraError> {
    let who = format!("{namespace}/{pod_uid}");
    let pod: Pod = serde_json::from_value(pod).map_err(|e| invalid(who.clone(), e.to_string()))?;
    if pod.metadata.uid != pod_uid || pod.metadata.namespace != namespace {
        return Err(invalid(
            who,
            format!(
                "the API server has pod UID {} in namespace {} (the pod was re-created)",
                pod.metadata.uid, pod.metadata.namespace
            ),
        ));
    }
    let claim_of = |pc: &PodClaim| -> Option<String> {
        if let Some(n) = &pc.resource_claim_name {
            return Some(n.clone());
        }
        let st = pod.status.resource_claim_statuses.iter();
        st.filter(|s| s.name == pc.name)
            .find_map(|s| s.resource_claim_name.clone())
    };
    let ours: Vec<&str> = pod
        .spec
        .resource_claims
        .iter()
        .filter(|pc| claim_of(pc).as_deref() == Some(claim_name))
        .map(|pc| pc.name.as_str())
        .collect();
    let mut out = ContainerIds::new();
    let containers = pod.spec.init_containers.iter().chain(&pod.spec.containers);
    for c in containers {
        for cc in c
            .resources
            .claims
            .iter()
            .filter(|cc| ours.contains(&cc.name.as_str()))
        {
            let ids = out.entry(c.name.clone()).or_default();
            for d in devices.iter().filter(|d| serves(d, cc.request.as_deref())) {
                for id in &d.cdi_device_ids {
                    if !ids.contains(id) {
                        ids.push(id.clone());
                    }
                }
            }
        }
    }
    Ok(out)
}

/// Whether device `d` serves `request` (none: the whole claim). A device without request
/// names serves every request (DRA v1 `Device.request_names`); `gpu` matches `gpu/sub`.
fn serves(d: &PreparedDevice, request: Option<&str>) -> bool {
    let Some(want) = request else { return true };
    d.requests.is_empty()
        || d.requests
            .iter()
            .any(|r| r == want || r.split('/').next() == Some(want))
}

/// The index file of pod `uid` in `dir`; `None` for a UID that is not a plain name.
pub fn path_of(dir: &Path, uid: &str) -> Option<PathBuf> {
    let ok = !uid.is_empty()
        && uid.len() <= 64
        && uid.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    ok.then(|| dir.join(format!("{uid}.json")))
}

fn io_err(path: &Path, message: impl std::fmt::Display) -> DraError {
    DraError::Index {
        path: path.to_path_buf(),
        message: message.to_string(),
    }
}

fn load(path: &Path) -> Result<PodIndex, DraError> {
    match gpuhook_node::bounded::read_bounded(path, MAX_INDEX_BYTES) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| io_err(path, e)),
        Err(e) if e.io_kind() == Some(std::io::ErrorKind::NotFound) => Ok(PodIndex::default()),
        Err(e) => Err(io_err(path, e)),
    }
}

fn store(path: &Path, index: &PodIndex) -> Result<(), DraError> {
    if index.claims.is_empty() {
        return match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io_err(path, e)),
            _ => Ok(()),
        };
    }
    let bytes = serde_json::to_vec_pretty(index).map_err(|e| io_err(path, e))?;
    gpuhook_fs::write_atomic(path, &bytes, 0o600).map_err(|e| io_err(path, e))
}

/// Records claim `claim_uid`'s containers of pod `pod_uid` in `dir` (created 0700).
pub fn record(
    dir: &Path,
    pod_uid: &str,
    claim_uid: &str,
    containers: ContainerIds,
) -> Result<(), DraError> {
    let path = path_of(dir, pod_uid).ok_or_else(|| invalid(pod_uid.into(), "not a UID"))?;
    let _held = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    create_private_dir(dir)?;
    let mut index = load(&path)?;
    if containers.is_empty() {
        index.claims.remove(claim_uid);
    } else {
        index.claims.insert(claim_uid.to_string(), containers);
    }
    store(&path, &index)
}

fn create_private_dir(dir: &Path) -> Result<(), DraError> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
    {
        Ok(()) => Ok(()),
        Err(e) => Err(io_err(dir, e)),
    }
}

/// The index files in `dir` (pod UID, path), at most [`MAX_INDEX_FILES`] entries read.
fn index_files(dir: &Path) -> Result<Vec<(String, PathBuf)>, DraError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_err(dir, e)),
    };
    let mut out = Vec::new();
    for entry in entries.take(MAX_INDEX_FILES) {
        let path = entry.map_err(|e| io_err(dir, e))?.path();
        let uid = path
            .file_stem()
            .and_then(|s| s.to_str())
            .map(str::to_string);
        match uid {
            Some(u) if path.extension().and_then(|e| e.to_str()) == Some("json") => {
                out.push((u, path))
            }
            _ => {}
        }
    }
    Ok(out)
}

/// Removes claim `claim_uid` from every pod's index in `dir` (a file left empty is removed).
/// A file that cannot be read or written does not stop the others; the first error is returned.
pub fn remove_claim(dir: &Path, claim_uid: &str) -> Result<(), DraError> {
    let _held = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let mut first = None;
    for (_, path) in index_files(dir)? {
        let res = load(&path).and_then(|mut index| match index.claims.remove(claim_uid) {
            Some(_) => store(&path, &index),
            None => Ok(()),
        });
        if let Err(e) = res {
            first.get_or_insert(e);
        }
    }
    first.map_or(Ok(()), Err)
}

/// The UIDs of the pods whose index in `dir` has an entry for claim `claim_uid` (a file that
/// cannot be read is skipped with a warning).
pub fn pods_of_claim(dir: &Path, claim_uid: &str) -> Result<BTreeSet<String>, DraError> {
    let _held = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let mut out = BTreeSet::new();
    for (uid, path) in index_files(dir)? {
        match load(&path) {
            Ok(index) if index.claims.contains_key(claim_uid) => {
                out.insert(uid);
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "claim index file skipped"),
        }
    }
    Ok(out)
}

#[cfg(test)]
#[path = "podindex_tests.rs"]
mod tests;
