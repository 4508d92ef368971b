//! Per-GPU state shared by the supervisors, the HTTP server and `status.json`.
//!
//! The supervisors are the only writers; every change wakes a writer task that rewrites
//! `<mpsRoot>/status.json` atomically, so `gpu-mps-daemon status` (and humans) can read the state
//! without talking to the daemon.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

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
}

/// Shared table of GPU states; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Board {
    inner: Arc<Mutex<Inner>>,
    changed: Arc<Notify>,
}

impl Board {
    fn with<R>(&self, f: impl FnOnce(&mut Inner) -> R) -> R {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let r = f(&mut g);
        drop(g);
        self.changed.notify_one();
        r
    }

    pub fn set_config(&self, config: Option<String>) {
        self.with(|i| i.config = config);
    }

    pub fn set_reload_error(&self, err: Option<String>) {
        self.with(|i| i.last_reload_error = err);
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
        StatusFile {
            format_version: STATUS_FORMAT_VERSION,
            pid: std::process::id(),
            updated_at: now_secs(),
            config: i.config.clone(),
            last_reload_error: i.last_reload_error.clone(),
            gpus,
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

    /// Resolves on the next change.
    pub async fn changed(&self) {
        self.changed.notified().await;
    }
}

/// Rewrites `status.json` after each change until `stop` resolves.
pub async fn write_loop(
    board: Board,
    path: std::path::PathBuf,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut stop = stop;
    loop {
        let snap = board.snapshot();
        match serde_json::to_vec_pretty(&snap) {
            Ok(data) => {
                if let Err(e) = crate::layout::write_atomic(&path, &data) {
                    tracing::warn!(error = %e, "cannot write status file");
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot serialise status"),
        }
        tokio::select! {
            _ = board.changed() => {}
            _ = stop.changed() => return,
        }
    }
}

/// Reads a status file written by a running daemon.
pub fn read(path: &Path) -> Result<StatusFile, String> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        format!(
            "cannot read {}: {e} (is gpu-mps-daemon running with this --mps-root?)",
            path.display()
        )
    })?;
    serde_json::from_str(&text).map_err(|e| format!("{} is not a status file: {e}", path.display()))
}

/// The human table of `gpu-mps-daemon status`.
pub fn render_table(s: &StatusFile, daemon_alive: bool) -> String {
    let mut out = String::new();
    let liveness = if daemon_alive {
        "running"
    } else {
        "NOT RUNNING (stale status file)"
    };
    out.push_str(&format!(
        "gpu-mps-daemon pid {} {liveness}, updated at {}\n",
        s.pid, s.updated_at
    ));
    if let Some(e) = &s.last_reload_error {
        out.push_str(&format!("last reload refused: {e}\n"));
    }
    let header = [
        "IDX",
        "UUID",
        "RESOURCE",
        "STATE",
        "PID",
        "THREADS%",
        "MEMLIMIT",
        "RESTARTS",
        "LAST ERROR",
    ];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
    for g in &s.gpus {
        rows.push(vec![
            g.index.to_string(),
            g.uuid.clone(),
            g.resource.clone(),
            g.state.as_str().to_string(),
            g.pid.map(|p| p.to_string()).unwrap_or_else(|| "-".into()),
            g.active_thread_percentage.to_string(),
            g.pinned_memory_limit_mib
                .map(|m| format!("{m}M"))
                .unwrap_or_else(|| "-".into()),
            g.restarts.to_string(),
            g.last_error.clone().unwrap_or_else(|| "-".into()),
        ]);
    }
    let widths: Vec<usize> = (0..header.len())
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    for r in rows {
        let line: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(c, v)| {
                if c + 1 == r.len() {
                    v.clone()
                } else {
                    format!("{v:<w$}", w = widths[c])
                }
            })
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}
