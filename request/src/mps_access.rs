//! Can this container's CUDA clients reach the MPS control daemon of the shares it asks for,
//! and be served? Checked at start by the runtime wrapper and the prestart hook, because a CUDA
//! client that cannot reach its daemon runs **without** MPS, with no limits at all
//! (`nvidia-cuda-mps-control(1)`: "If the connection attempt fails, the program continues to run
//! as it normally would without MPS"), and one whose user differs from the running server's
//! waits, without a message, until every client of that server is done (the same page).
//!
//! For each `nvidia.com/gpu-mps` device the container gets, from the pipe directory its spec
//! mounts (`<mpsRoot>/<uuid>/pipe`, written by gpu-mps-daemon):
//! 1. the GPU's `ready` file (`<mpsRoot>/<uuid>/ready`, root's, never given to containers) must
//!    exist and name that pipe directory: the limits are applied and the daemon answers;
//! 2. its `clientUser` (gpu-mps-daemon's `mpsDaemon.clientUser`), when set, must be the
//!    container's user;
//! 3. a container user other than root must be able to reach the control socket on the host:
//!    its MPS server runs as that user and connects to `<pipe>/control` through the host path
//!    (each directory above searchable, the pipe directory writable and searchable, the
//!    socket writable);
//! 4. no server of another user may be serving clients (gpu-mps-daemon's `status.json`,
//!    `usage.serverUsers` and `usage.clients`).
//!
//! The files read are bounded; the user is the host's view of `process.user` (through the
//! user namespace's `linux.uidMappings`/`gidMappings` when it has them).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use gpuhook_cdi::Registry;
use serde_json::Value;

/// Where CUDA looks when `CUDA_MPS_PIPE_DIRECTORY` is unset.
const DEFAULT_PIPE: &str = "/tmp/nvidia-mps";

/// Why a container is not started with the MPS share it asks for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MpsAccessError {
    #[error("MPS share {name}: its control daemon is not ready ({reason}); a CUDA client that cannot reach it runs without MPS limits, so the container is not started: check `gpu-mps-daemon status` and start it again")]
    NotReady { name: String, reason: String },
    #[error("MPS share {name} admits only uid {client_user} (gpu-mps-daemon's mpsDaemon.clientUser); this container runs as uid {uid}: run it as uid {client_user} (Kubernetes: securityContext.runAsUser: {client_user})")]
    WrongUser {
        name: String,
        uid: u32,
        client_user: u32,
    },
    #[error("MPS share {name}: uid {uid} cannot {need} {} (mode {mode:04o}, owner {owner}:{group}); its MPS server runs as that user and would fail, and CUDA would run without MPS: make it accessible (e.g. mode 0755 for a directory above the pipe directory) or run the container as root", path.display())]
    Unreachable {
        name: String,
        uid: u32,
        path: PathBuf,
        need: &'static str,
        mode: u32,
        owner: u32,
        group: u32,
    },
    #[error("MPS share {name} is in use by uid {other_uid} (MPS server pid {server}, {clients} client(s)); the control daemon runs one user's server at a time, so this container (uid {uid}) would wait, without a message, until every client of uid {other_uid} is done: run every MPS client of this GPU as one user (gpu-mps-daemon's mpsDaemon.clientUser) or use another GPU")]
    OtherUser {
        name: String,
        uid: u32,
        other_uid: u32,
        server: u32,
        clients: usize,
    },
}

/// The user a container's process runs as, as the host sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessUser {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
}

fn id(v: &Value) -> Option<u32> {
    v.as_u64().and_then(|n| u32::try_from(n).ok())
}

/// `id` through the mappings of a user namespace (`[{containerID, hostID, size}]`); the
/// overflow id 65534 when no range holds it; `id` itself without mappings.
fn map_id(mappings: &Value, v: u32) -> u32 {
    let Some(ranges) = mappings.as_array().filter(|r| !r.is_empty()) else {
        return v;
    };
    for r in ranges {
        let (Some(c), Some(h), Some(n)) = (id(&r["containerID"]), id(&r["hostID"]), id(&r["size"]))
        else {
            continue;
        };
        if v >= c && v - c < n {
            return h.saturating_add(v - c);
        }
    }
    65534
}

impl ProcessUser {
    /// `process.user` of an OCI `config.json` (0 where absent), mapped to the host.
    pub fn of(config: &Value) -> ProcessUser {
        let user = &config["process"]["user"];
        let linux = &config["linux"];
        let uid = map_id(&linux["uidMappings"], id(&user["uid"]).unwrap_or(0));
        let gid_of = |v: u32| map_id(&linux["gidMappings"], v);
        let groups = user["additionalGids"]
            .as_array()
            .map(|a| a.iter().filter_map(id).map(gid_of).collect())
            .unwrap_or_default();
        ProcessUser {
            uid,
            gid: gid_of(id(&user["gid"]).unwrap_or(0)),
            groups,
        }
    }

    /// Whether this user has all of `bits` (r=4, w=2, x=1) on a file with `meta`.
    pub fn may(&self, meta: &std::fs::Metadata, bits: u32) -> bool {
        let mode = meta.permissions().mode();
        let class = if meta.uid() == self.uid {
            mode >> 6
        } else if meta.gid() == self.gid || self.groups.contains(&meta.gid()) {
            mode >> 3
        } else {
            mode
        };
        class & bits == bits
    }
}

/// One requested MPS share: its CDI name and the host path of its pipe directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MpsShare {
    pub name: String,
    pub pipe_dir: PathBuf,
}

/// The share a `gpuhook hook setup --mps-share` names (gpu-mps-daemon's spec writes it).
impl From<&gpuhook_cdi::edits::SetupMpsShare> for MpsShare {
    fn from(s: &gpuhook_cdi::edits::SetupMpsShare) -> Self {
        MpsShare {
            name: s.name.clone(),
            pipe_dir: s.pipe_dir.clone(),
        }
    }
}

/// The host pipe directory of each `nvidia.com/gpu-mps` name of `names` in `registry` (the
/// kind gpu-mps-daemon publishes): the mount whose container path is
/// the device's `CUDA_MPS_PIPE_DIRECTORY` (CUDA's default without one). Names without one are
/// left out (nothing to reach).
pub fn mps_shares(registry: &Registry, names: &[String]) -> Vec<MpsShare> {
    let mut out: Vec<MpsShare> = Vec::new();
    let kind = format!("{}=", crate::NVIDIA_GPU_MPS_KIND);
    for name in names.iter().filter(|n| n.starts_with(&kind)) {
        let Some(d) = registry.get(name) else {
            continue;
        };
        let edits = [&d.device().container_edits, &d.spec.spec.container_edits];
        let pipe = edits
            .iter()
            .flat_map(|e| e.env.iter())
            .find_map(|e| e.strip_prefix("CUDA_MPS_PIPE_DIRECTORY="))
            .unwrap_or(DEFAULT_PIPE);
        let mount = edits
            .iter()
            .flat_map(|e| e.mounts.iter())
            .find(|m| Path::new(&m.container_path) == Path::new(pipe));
        if let Some(m) = mount {
            if !out.iter().any(|s| s.name == *name) {
                out.push(MpsShare {
                    name: name.clone(),
                    pipe_dir: PathBuf::from(&m.host_path),
                });
            }
        }
    }
    out
}

#[cfg(test)]
#[path = "mps_access_tests.rs"]
mod tests;
