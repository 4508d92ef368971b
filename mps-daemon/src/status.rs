//! Per-GPU state shared by the supervisors, the HTTP server and `status.json`.
//!
//! The supervisors are the only writers; every change wakes a writer task that rewrites
//! `<mpsRoot>/status.json` atomically, so `gpu-mps-daemon status` (and humans) can read the state
//! without talking to the daemon.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::cri::PodRef;
use crate::histogram::Histogram;

/// Version of the status file format.
pub const STATUS_FORMAT_VERSION: u32 = 1;

/// Lifecycle of one GPU's control daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GpuState {
    /// Starting the daemon and applying limits.
    Starting,
    /// Limits applied and read back; the daemon answers probes; the ready file exists.
    Ready,
    /// The daemon crashed or wedged; waiting (backoff) before starting it again.
    Restarting,
    /// Bringing the daemon up failed; retried after a backoff.
    Failed,
    /// Being shut down (SIGTERM or removed by a reload).
    Stopping,
}

impl GpuState {
    pub fn as_str(self) -> &'static str {
        match self {
            GpuState::Starting => "starting",
            GpuState::Ready => "ready",
            GpuState::Restarting => "restarting",
            GpuState::Failed => "failed",
            GpuState::Stopping => "stopping",
        }
    }
}

/// One GPU in `status.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GpuStatus {
    pub uuid: String,
    pub index: u32,
    pub resource: String,
    pub replicas: u32,
    pub state: GpuState,
    /// Pid of the control daemon, while one runs.
    pub pid: Option<i32>,
    /// Limits as configured.
    pub active_thread_percentage: u32,
    #[serde(rename = "pinnedMemoryLimitMiB")]
    pub pinned_memory_limit_mib: Option<u64>,
    /// Limits as read back from the daemon at the last bring-up.
    pub applied_active_thread_percentage: Option<f64>,
    #[serde(rename = "appliedPinnedMemoryLimitMiB")]
    pub applied_pinned_memory_limit_mib: Option<u64>,
    pub restarts: u32,
    pub last_error: Option<String>,
    /// Unix seconds of `last_error`.
    pub last_error_at: Option<u64>,
    /// Unix seconds since which the GPU is ready.
    pub ready_since: Option<u64>,
    pub pipe_directory: String,
    pub log_directory: String,
    pub shm_directory: Option<String>,
    /// Servers and clients seen by the watcher, and what it did.
    #[serde(default)]
    pub usage: Usage,
}

/// What the client watcher saw on one GPU at its last pass.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    /// MPS server pids.
    pub servers: Vec<u32>,
    pub clients: Vec<ClientStatus>,
    /// Clients ended, by reason (`over_cap`, `container_gone`, `process_gone`).
    pub terminations: BTreeMap<String, u64>,
    /// Servers that got the per-server limits.
    pub servers_limited: u64,
    /// Unix seconds of the last completed pass.
    pub last_pass_at: Option<u64>,
    pub last_pass_error: Option<String>,
    /// Limits found changed (through the pipe directory) and restored, by scope
    /// (`default`: the daemon's defaults, `server`: one server's limits).
    #[serde(default)]
    pub limit_drifts: BTreeMap<String, u64>,
    /// Probes that could not be run for a reason of our own (no fds, cannot fork).
    #[serde(default)]
    pub probes_inconclusive: u64,
    /// The user (real uid) each MPS server runs as, by server pid.
    #[serde(default)]
    pub server_users: BTreeMap<u32, u32>,
    /// Clients waiting for another user's server to be done ([`crate::users`]).
    #[serde(default)]
    pub waiting_clients: Vec<WaitingClient>,
}

/// A client the control daemon keeps waiting: it serves one user at a time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WaitingClient {
    pub pid: u32,
    pub uid: u32,
    /// Users of the running servers it waits for.
    pub waits_for_uids: Vec<u32>,
}

impl Usage {
    /// Number of clients per container id (host processes are not counted).
    pub fn clients_per_container(&self) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for c in &self.clients {
            if let Some(id) = &c.container {
                *out.entry(id.clone()).or_insert(0) += 1;
            }
        }
        out
    }
}

/// One MPS client process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClientStatus {
    pub pid: u32,
    pub server: u32,
    /// Container id, `None` for a host process.
    pub container: Option<String>,
    /// Naming scheme the container was recognised by (`containerd`, `cri-o`, `podman`, ...).
    pub runtime: Option<String>,
    /// Kubernetes pod, namespace and container name (`--cri-socket` only; absent when unknown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_name: Option<String>,
}

/// The whole file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusFile {
    pub format_version: u32,
    /// Pid of gpu-mps-daemon.
    pub pid: u32,
    /// Unix seconds of this snapshot.
    pub updated_at: u64,
    pub config: Option<String>,
    /// Error of the last SIGHUP reload, if it was refused.
    pub last_reload_error: Option<String>,
    pub gpus: Vec<GpuStatus>,
    /// The `nvidia.com/gpu-mps` CDI spec.
    #[serde(default)]
    pub cdi: CdiStatus,
}

/// State of the CDI spec file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CdiStatus {
    pub spec_path: Option<String>,
    /// Qualified names of the devices in the file (empty: no file).
    pub devices: Vec<String>,
    pub last_error: Option<String>,
}

/// Seconds since the epoch.
pub fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[derive(Debug, Default)]
struct Inner {
    gpus: BTreeMap<String, GpuStatus>,
    config: Option<String>,
    last_reload_error: Option<String>,
    cdi: CdiStatus,
    /// The config shares no GPU with MPS: nothing to run, and that is ready.
    idle: bool,
    /// Kubernetes names of container ids, from the CRI runtime (see [`crate::attrib`]).
    pods: BTreeMap<String, PodRef>,
}

/// Command latencies per GPU UUID and command word.
type Latencies = BTreeMap<String, BTreeMap<String, Histogram>>;

/// Shared table of GPU states; cheap to clone.
#[derive(Debug, Clone)]
pub struct Board {
    inner: Arc<Mutex<Inner>>,
    /// Bumped on every change; each watcher of the board has its own receiver.
    changed: Arc<watch::Sender<u64>>,
    latency: Arc<Mutex<Latencies>>,
    identity: Arc<Mutex<Identities>>,
}

/// What `/metrics` labels a GPU with besides its index and UUID (from the node inventory).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GpuIdentity {
    /// Product name (`NVIDIA H100 80GB HBM3`), dcgm-exporter's `modelName`.
    pub model_name: String,
    /// PCI bus id, dcgm-exporter's `pci_bus_id`.
    pub pci_bus_id: String,
}

/// GPU identities by UUID.
pub type Identities = BTreeMap<String, GpuIdentity>;

impl Default for Board {
    fn default() -> Self {
        Board {
            inner: Arc::default(),
            changed: Arc::new(watch::channel(0).0),
            latency: Arc::default(),
            identity: Arc::default(),
        }
    }
}

impl Board {
    fn with<R>(&self, f: impl FnOnce(&mut Inner) -> R) -> R {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let r = f(&mut g);
        drop(g);
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
        r
    }

    pub fn set_config(&self, config: Option<String>) {
        self.with(|i| i.config = config);
    }

    /// Marks the daemon as having nothing to run (no `sharing.mps` on this node).
    pub fn set_idle(&self, idle: bool) {
        self.with(|i| i.idle = idle);
    }

    pub fn is_idle(&self) -> bool {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).idle
    }

    pub fn set_reload_error(&self, err: Option<String>) {
        self.with(|i| i.last_reload_error = err);
    }

    /// Records the CDI spec's state.
    pub fn set_cdi(&self, cdi: CdiStatus) {
        self.with(|i| i.cdi = cdi);
    }

    /// Replaces the GPU identities (after each inventory read).
    pub fn set_identities(&self, ids: Identities) {
        *self.identity.lock().unwrap_or_else(|e| e.into_inner()) = ids;
    }

    pub fn identities(&self) -> Identities {
        self.identity
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Replaces the Kubernetes names of container ids (shown on the clients of those ids).
    pub fn set_pods(&self, pods: BTreeMap<String, PodRef>) {
        self.with(|i| i.pods = pods);
    }

    /// Adds or replaces a GPU entry.
    pub fn insert(&self, s: GpuStatus) {
        self.with(|i| i.gpus.insert(s.uuid.clone(), s));
    }

    pub fn remove(&self, uuid: &str) {
        self.with(|i| i.gpus.remove(uuid));
    }

    /// Changes one GPU's entry (no-op when absent).
    pub fn update(&self, uuid: &str, f: impl FnOnce(&mut GpuStatus)) {
        self.with(|i| {
            if let Some(s) = i.gpus.get_mut(uuid) {
                f(s);
            }
        });
    }

    pub fn get(&self, uuid: &str) -> Option<GpuStatus> {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .gpus
            .get(uuid)
            .cloned()
    }

    pub fn snapshot(&self) -> StatusFile {
        let i = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let mut gpus: Vec<GpuStatus> = i.gpus.values().cloned().collect();
        gpus.sort_by_key(|g| g.index);
        for c in gpus.iter_mut().flat_map(|g| g.usage.clients.iter_mut()) {
            if let Some(p) = c.container.as_ref().and_then(|id| i.pods.get(id)) {
                c.pod = Some(p.pod.clone());
                c.namespace = Some(p.namespace.clone());
                c.container_name = Some(p.container.clone());
            }
        }
        StatusFile {
            format_version: STATUS_FORMAT_VERSION,
            pid: std::process::id(),
            updated_at: now_secs(),
            config: i.config.clone(),
            last_reload_error: i.last_reload_error.clone(),
            gpus,
            cdi: i.cdi.clone(),
        }
    }

    /// GPUs that are not ready (all ready when empty and at least one GPU exists).
    pub fn not_ready(&self) -> (usize, Vec<GpuStatus>) {
        let i = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let list = i
            .gpus
            .values()
            .filter(|g| g.state != GpuState::Ready)
            .cloned()
            .collect();
        (i.gpus.len(), list)
    }

    /// A receiver that sees every later change.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Records how long a control command took (not a state change: no status rewrite).
    pub fn observe_command(&self, uuid: &str, command: &str, secs: f64) {
        let mut l = self.latency.lock().unwrap_or_else(|e| e.into_inner());
        l.entry(uuid.to_string())
            .or_default()
            .entry(command.to_string())
            .or_default()
            .observe(secs);
    }

    /// A copy of the command latencies.
    pub fn latencies(&self) -> Latencies {
        self.latency
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}
