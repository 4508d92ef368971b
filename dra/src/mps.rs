//! One MPS control daemon per claim, through gpu-mps-daemon's building blocks (`ControlEnv`,
//! `DaemonProc`, the layout): the claim's limits are in the daemon's environment from its first
//! moment and are read back before `NodePrepareResources` answers, so no client of the claim
//! can connect before they are in force (NVIDIA's driver starts a Deployment and waits for its
//! pod to be Ready, with no such guarantee; dra-facts §5).
//!
//! Layout: `<state dir>/mps/<claim UID>/{pipe,log,shm,ready,compute-mode.json}`; the pipe dir
//! is bind-mounted at `/tmp/nvidia-mps` and `shm` at `/dev/shm` in the claim's containers (its
//! CDI spec; `shm` is also the daemon's `/dev/shm`); `ready` and the compute mode: `mps_node.rs`.
//! The daemon gets
//! `CUDA_VISIBLE_DEVICES=<uuids of the claim's devices>`,
//! `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` and `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=<n>M,1=<m>M,…`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use gpu_mps_daemon::control::{parse_mem_limit_mib, parse_percentage, ControlEnv};
use gpu_mps_daemon::daemon_proc::{self, DaemonProc};
use gpu_mps_daemon::inventory::ComputeModeSetter;
use gpu_mps_daemon::layout::{CreatedDirs, GpuLayout};
use gpu_mps_daemon::plan::{GpuPlan, MAX_SOCKET_PATH};

use crate::mps_node;

/// How claim daemons are run.
#[derive(Debug, Clone)]
pub struct MpsOptions {
    /// `<state dir>/mps`.
    pub root: PathBuf,
    pub driver_root: PathBuf,
    pub control_binary: PathBuf,
    pub start_timeout: Duration,
    pub command_timeout: Duration,
    /// Each daemon gets its own `/dev/shm` dir, shared with its claims' containers (the daemon
    /// runs in a private mount namespace: needs CAP_SYS_ADMIN).
    pub shm: bool,
    /// Sets the GPUs' compute mode (EXCLUSIVE_PROCESS while a daemon runs).
    pub compute: Arc<dyn ComputeModeSetter>,
}

/// What one claim's daemon enforces, per device in `CUDA_VISIBLE_DEVICES` order.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimMps {
    pub uuids: Vec<String>,
    pub active_thread_percentage: u32,
    /// Pinned-memory limit of each device (same order as `uuids`), in MiB.
    pub pinned_limits_mib: Vec<Option<u64>>,
    /// A consumable-capacity share (KEP-5075): served by its GPU's one control daemon, shared
    /// with the GPU's other shares (`mps_share.rs`), not by a daemon of its own.
    #[serde(default)]
    pub shared: bool,
}

/// What a claim's containers get for MPS: the pipe dir and `/dev/shm` dir to mount (host
/// paths) and the client environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MpsEdits {
    pub pipe: PathBuf,
    pub shm: Option<PathBuf>,
    pub env: Vec<String>,
}

/// A running claim daemon.
#[derive(Debug)]
pub struct MpsDaemon {
    pub layout: GpuLayout,
    proc: DaemonProc,
    dirs: CreatedDirs,
}

/// The layout of claim `uid`.
pub fn claim_layout(root: &Path, uid: &str) -> GpuLayout {
    GpuLayout::new(root, uid)
}

pub(crate) fn env(opts: &MpsOptions, layout: &GpuLayout, want: &ClaimMps) -> ControlEnv {
    let plan = GpuPlan {
        index: 0,
        uuid: want.uuids.join(","),
        resource: "gpu.nvidia.com".into(),
        replicas: 1,
        memory_mib: 0,
        active_thread_percentage: want.active_thread_percentage,
        pinned_memory_limit_mib: None,
        shm_size: None,
        driver_root: opts.driver_root.clone(),
        control_binary: opts.control_binary.clone(),
        shares: Vec::new(),
        client_user: None,
    };
    let shm = opts.shm.then(|| layout.shm.clone());
    let mut env = ControlEnv::new(&plan, layout, shm);
    let limits: Vec<String> = want
        .pinned_limits_mib
        .iter()
        .enumerate()
        .filter_map(|(i, m)| m.map(|m| format!("{i}={m}M")))
        .collect();
    if !limits.is_empty() {
        env.daemon_envs.push((
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT".into(),
            OsString::from(limits.join(",")),
        ));
    }
    env
}

/// Reads the daemon's defaults back; a description of the difference, if any.
pub(crate) async fn check(env: &ControlEnv, want: &ClaimMps, to: Duration) -> Result<(), String> {
    let mut cmd = vec!["get_default_active_thread_percentage".to_string()];
    let limited: Vec<(usize, u64)> = want
        .pinned_limits_mib
        .iter()
        .enumerate()
        .filter_map(|(i, m)| m.map(|m| (i, m)))
        .collect();
    for (i, _) in &limited {
        cmd.push(format!("get_default_device_pinned_mem_limit {i}"));
    }
    let reply = env
        .send(&cmd.join("\n"), to)
        .await
        .map_err(|e| e.to_string())?;
    let mut lines = reply.lines().map(str::trim).filter(|l| !l.is_empty());
    let pct = lines.next().and_then(parse_percentage);
    if pct.is_none_or(|p| (p - f64::from(want.active_thread_percentage)).abs() > 0.5) {
        return Err(format!(
            "active thread percentage read back as {pct:?}, want {}",
            want.active_thread_percentage
        ));
    }
    for (i, m) in limited {
        let got = lines.next().and_then(parse_mem_limit_mib);
        if got != Some(m) {
            return Err(format!(
                "device {i} pinned memory limit read back as {got:?} MiB, want {m} MiB"
            ));
        }
    }
    Ok(())
}

impl MpsDaemon {
    /// Starts claim `uid`'s daemon and returns once its limits read back as `want`. On error
    /// nothing is left running and the claim's dirs are removed.
    pub async fn start(opts: &MpsOptions, uid: &str, want: &ClaimMps) -> Result<Self, String> {
        Self::start_at(opts, claim_layout(&opts.root, uid), uid, want).await
    }

    /// Starts a daemon at `layout` (`name` for the log) and returns once its limits read back
    /// as `want`. On error nothing is left running and the dirs it made are removed.
    pub async fn start_at(
        opts: &MpsOptions,
        layout: GpuLayout,
        name: &str,
        want: &ClaimMps,
    ) -> Result<Self, String> {
        let sock = layout.control_socket();
        if sock.as_os_str().len() > MAX_SOCKET_PATH {
            return Err(format!(
                "control socket path {} is longer than {MAX_SOCKET_PATH} bytes (shorten --state-dir)",
                sock.display()
            ));
        }
        let mut dirs = CreatedDirs::default();
        let mut made = dirs
            .ensure(&layout.pipe, 0o755)
            .and_then(|()| dirs.ensure(&layout.log, 0o755));
        if opts.shm {
            made = made.and_then(|()| dirs.ensure(&layout.shm, 0o1777));
        }
        if let Err(e) = made {
            dirs.remove_all();
            return Err(e.to_string());
        }
        mps_node::remove_ready(&layout);
        mps_node::set_exclusive(opts.compute.as_ref(), &layout.dir, &want.uuids);
        let env = env(opts, &layout, want);
        let proc = match DaemonProc::start(&env, &layout, opts.start_timeout).await {
            Ok(p) => p,
            Err(e) => {
                mps_node::restore(opts.compute.as_ref(), &layout.dir);
                dirs.remove_all();
                return Err(e.to_string());
            }
        };
        let pid = proc.id.pid;
        let daemon = MpsDaemon { layout, proc, dirs };
        let ready = match check(&env, want, opts.command_timeout).await {
            Ok(()) => mps_node::write_ready(
                &daemon.layout,
                pid,
                &want.uuids,
                want.active_thread_percentage,
                &want.pinned_limits_mib,
            ),
            Err(e) => Err(format!("limits not in force: {e}")),
        };
        if let Err(e) = ready {
            daemon.stop(opts).await;
            return Err(e);
        }
        tracing::info!(daemon = name, devices = %want.uuids.join(","), threads = want.active_thread_percentage, "MPS control daemon ready");
        Ok(daemon)
    }

    /// The layout and process, for supervision (`mps_supervise.rs`); the dirs are removed with
    /// the daemon dir when it stops.
    pub fn into_parts(self) -> (GpuLayout, DaemonProc) {
        (self.layout, self.proc)
    }

    /// Stops the daemon (its ready marker removed first), restores the GPUs' compute mode and
    /// removes the claim's dirs.
    pub async fn stop(self, opts: &MpsOptions) {
        let MpsDaemon {
            layout,
            proc,
            mut dirs,
        } = self;
        mps_node::remove_ready(&layout);
        proc.stop(opts.command_timeout).await;
        mps_node::restore(opts.compute.as_ref(), &layout.dir);
        for e in dirs.remove_all() {
            tracing::warn!(dir = %layout.dir.display(), error = %e, "MPS dir left behind");
        }
    }
}

/// Stops the daemon of claim `uid` left by an earlier run of the plugin (from its record),
/// restores the compute mode it recorded and removes the claim's dir.
pub async fn stop_stale(opts: &MpsOptions, uid: &str) {
    stop_stale_at(opts, &claim_layout(&opts.root, uid), uid).await;
}

/// [`stop_stale`] of the daemon at `layout` (`name` for the log).
pub async fn stop_stale_at(opts: &MpsOptions, layout: &GpuLayout, name: &str) {
    mps_node::remove_ready(layout);
    daemon_proc::stop_stale(layout, name, opts.command_timeout).await;
    mps_node::restore(opts.compute.as_ref(), &layout.dir);
    if let Err(e) = std::fs::remove_dir_all(&layout.dir) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(dir = %layout.dir.display(), error = %e, "MPS dir left behind");
        }
    }
}
