//! One task per GPU: start the control daemon, apply limits, mark ready, probe, restart.
//!
//! The order matters and is the point of this daemon: a GPU is marked ready (ready file, `/readyz`)
//! only after the limits were set AND read back from the daemon, so a client that waits for the
//! ready file can never connect to an unlimited daemon. Any failed probe (process gone, socket
//! refusing, no reply within the bound) removes the ready file first, then kills and restarts the
//! daemon with exponential backoff; limits are applied again before it is ready again.

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::control::{parse_mem_limit_mib, parse_percentage, ControlEnv};
use crate::inventory::{ComputeMode, ComputeModeSetter};
use crate::layout::{self, CreatedDirs, GpuLayout};
use crate::plan::{GpuPlan, Timing};
use crate::process;
use crate::settings::EnforceSettings;
use crate::shm;
use crate::status::{now_secs, Board, GpuState, GpuStatus};
use crate::watcher::Watcher;

/// A ready period at least this long resets the backoff.
const STABLE_AFTER: Duration = Duration::from_secs(10);
/// First restart delay; doubled per consecutive failure up to `maxRestartBackoff`.
const BACKOFF_BASE: Duration = Duration::from_millis(100);
/// How long a killed daemon gets between SIGTERM and SIGKILL.
const KILL_GRACE: Duration = Duration::from_secs(1);

/// Delay before restart number `failures` (1-based).
pub fn backoff(failures: u32, max: Duration) -> Duration {
    let shift = failures.saturating_sub(1).min(20);
    BACKOFF_BASE.saturating_mul(1 << shift).min(max)
}

/// Supervisor of one GPU's control daemon.
#[derive(Debug)]
pub struct GpuSupervisor {
    pub plan: GpuPlan,
    pub layout: GpuLayout,
    pub board: Board,
    pub timing: watch::Receiver<Timing>,
    pub compute: Arc<dyn ComputeModeSetter>,
    /// Client enforcement settings, changeable by a reload.
    pub enforce: watch::Receiver<EnforceSettings>,
    /// Pid of the daemon we started last (0: none); used when its pid file has vanished.
    started: AtomicI32,
}

/// What the supervisor set up and must undo.
#[derive(Debug, Default)]
struct Undo {
    dirs: CreatedDirs,
    mounted: bool,
    prev_mode: Option<ComputeMode>,
    mode_tried: bool,
}

impl GpuSupervisor {
    pub fn new(
        plan: GpuPlan,
        mps_root: &std::path::Path,
        board: Board,
        timing: watch::Receiver<Timing>,
        compute: Arc<dyn ComputeModeSetter>,
        enforce: watch::Receiver<EnforceSettings>,
    ) -> Self {
        let layout = GpuLayout::new(mps_root, &plan.uuid);
        GpuSupervisor {
            plan,
            layout,
            board,
            timing,
            compute,
            enforce,
            started: AtomicI32::new(0),
        }
    }

    /// The daemon's pid: from its pid file, else the one we started.
    fn daemon_pid(&self) -> Option<i32> {
        process::read_pid(&self.layout.pid_file())
            .or_else(|| Some(self.started.load(Ordering::Relaxed)).filter(|p| *p > 0))
    }

    fn env(&self) -> ControlEnv {
        let shm = self.plan.shm_size.map(|_| self.layout.shm.clone());
        let mut env = ControlEnv::new(&self.plan, &self.layout, shm);
        env.latency = Some((self.board.clone(), self.plan.uuid.clone()));
        env
    }

    fn initial_status(&self) -> GpuStatus {
        GpuStatus {
            uuid: self.plan.uuid.clone(),
            index: self.plan.index,
            resource: self.plan.resource.clone(),
            replicas: self.plan.replicas,
            state: GpuState::Starting,
            pid: None,
            active_thread_percentage: self.plan.active_thread_percentage,
            pinned_memory_limit_mib: self.plan.pinned_memory_limit_mib,
            applied_active_thread_percentage: None,
            applied_pinned_memory_limit_mib: None,
            restarts: 0,
            last_error: None,
            last_error_at: None,
            ready_since: None,
            usage: Default::default(),
            pipe_directory: self.layout.pipe.display().to_string(),
            log_directory: self.layout.log.display().to_string(),
            shm_directory: self
                .plan
                .shm_size
                .map(|_| self.layout.shm.display().to_string()),
        }
    }

    fn set_state(&self, state: GpuState, error: Option<String>) {
        self.board.update(&self.plan.uuid, |s| {
            s.state = state;
            if state != GpuState::Ready {
                s.ready_since = None;
            }
            if let Some(e) = error {
                s.last_error = Some(e);
                s.last_error_at = Some(now_secs());
            }
        });
    }

    /// Runs until `stop` changes (or its sender is dropped), then shuts the daemon down and
    /// removes what it created.
    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        let uuid = self.plan.uuid.clone();
        self.board.insert(self.initial_status());
        let mut undo = Undo::default();
        let mut failures: u32 = 0;
        let env = self.env();
        let mut watcher = Watcher::new(
            &uuid,
            self.enforce.borrow().clone(),
            (
                self.plan.active_thread_percentage,
                self.plan.pinned_memory_limit_mib,
            ),
        );
        loop {
            self.set_state(GpuState::Starting, None);
            let up = tokio::select! {
                r = self.bring_up(&env, &mut undo) => r,
                _ = stop.changed() => break,
            };
            match up {
                Ok(pid) => {
                    let since = Instant::now();
                    tracing::info!(gpu = %uuid, pid, "control daemon ready");
                    watcher.reset();
                    let reason = tokio::select! {
                        r = self.probe_until_failure(&env, pid, &mut watcher) => r,
                        _ = stop.changed() => break,
                    };
                    let _ = layout::remove_file_if_exists(&self.layout.ready);
                    tracing::warn!(gpu = %uuid, pid, reason = %reason, "control daemon unhealthy; restarting");
                    self.set_state(GpuState::Restarting, Some(reason));
                    if since.elapsed() >= STABLE_AFTER {
                        failures = 0;
                    }
                }
                Err(e) => {
                    let _ = layout::remove_file_if_exists(&self.layout.ready);
                    tracing::error!(gpu = %uuid, error = %e, "bringing up the control daemon failed");
                    self.set_state(GpuState::Failed, Some(e));
                }
            }
            self.kill_daemon().await;
            failures += 1;
            let delay = backoff(failures, self.timing.borrow().max_restart_backoff);
            self.board.update(&uuid, |s| {
                s.restarts += 1;
                s.pid = None;
            });
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = stop.changed() => break,
            }
        }
        self.shutdown(&env, undo).await;
    }

    /// Directories, tmpfs, compute mode, daemon start, limits, read-back, ready file.
    async fn bring_up(&self, env: &ControlEnv, undo: &mut Undo) -> Result<i32, String> {
        let l = &self.layout;
        // A ready file left by an instance that was killed must not outlive this bring-up.
        layout::remove_file_if_exists(&l.ready).map_err(|e| e.to_string())?;
        for d in [&l.pipe, &l.log] {
            undo.dirs.ensure(d, 0o755).map_err(|e| e.to_string())?;
        }
        if let Some(size) = self.plan.shm_size {
            undo.dirs
                .ensure(&l.shm, 0o1777)
                .map_err(|e| e.to_string())?;
            if !undo.mounted {
                if !shm::is_mount_point(&l.shm) {
                    shm::mount_tmpfs(&l.shm, size)?;
                }
                undo.mounted = true;
            }
        }
        self.kill_daemon().await;
        if !undo.mode_tried {
            undo.mode_tried = true;
            match self
                .compute
                .set_compute_mode(&self.plan.uuid, ComputeMode::ExclusiveProcess)
            {
                Ok(prev) => undo.prev_mode = Some(prev),
                Err(e) => tracing::warn!(gpu = %self.plan.uuid, error = %e,
                    "compute mode not set to EXCLUSIVE_PROCESS; other processes may use the GPU outside MPS"),
            }
        }
        let t = *self.timing.borrow();
        let pid = env
            .start_daemon(l, t.start_timeout)
            .await
            .map_err(|e| e.to_string())?;
        self.started.store(pid, Ordering::Relaxed);
        self.board.update(&self.plan.uuid, |s| s.pid = Some(pid));
        let (pct, mem) = self.apply_limits(env, t.command_timeout).await?;
        let ready = serde_json::json!({
            "uuid": self.plan.uuid,
            "pid": pid,
            "supervisorPid": std::process::id(),
            "activeThreadPercentage": pct,
            "pinnedMemoryLimitMiB": mem,
            "pipeDirectory": l.pipe,
        });
        layout::write_atomic(&l.ready, ready.to_string().as_bytes()).map_err(|e| e.to_string())?;
        self.board.update(&self.plan.uuid, |s| {
            s.state = GpuState::Ready;
            s.ready_since = Some(now_secs());
            s.applied_active_thread_percentage = Some(pct);
            s.applied_pinned_memory_limit_mib = mem;
        });
        Ok(pid)
    }

    /// Sets the default limits (device by ordinal 0: CUDA_VISIBLE_DEVICES leaves the daemon one
    /// GPU, and limits set by UUID were ignored by some drivers) and reads them back.
    async fn apply_limits(
        &self,
        env: &ControlEnv,
        to: Duration,
    ) -> Result<(f64, Option<u64>), String> {
        let want_pct = self.plan.active_thread_percentage;
        let e = |e: crate::control::ControlError| e.to_string();
        // Both settings in one client run (one process instead of two); replies are not relied
        // upon, the values are read back below.
        let mut set = format!("set_default_active_thread_percentage {want_pct}");
        if let Some(m) = self.plan.pinned_memory_limit_mib {
            set.push_str(&format!("\nset_default_device_pinned_mem_limit 0 {m}M"));
        }
        env.send(&set, to).await.map_err(e)?;
        let reply = env
            .send("get_default_active_thread_percentage", to)
            .await
            .map_err(e)?;
        let pct = parse_percentage(&reply).ok_or_else(|| {
            format!("unexpected reply to get_default_active_thread_percentage: {reply:?}")
        })?;
        if (pct - f64::from(want_pct)).abs() > 0.5 {
            return Err(format!(
                "active thread percentage not applied: set {want_pct}, daemon reports {reply:?}"
            ));
        }
        let mut mem = None;
        if let Some(m) = self.plan.pinned_memory_limit_mib {
            let reply = env
                .send("get_default_device_pinned_mem_limit 0", to)
                .await
                .map_err(e)?;
            let got = parse_mem_limit_mib(&reply).ok_or_else(|| {
                format!("unexpected reply to get_default_device_pinned_mem_limit 0: {reply:?}")
            })?;
            if got != m {
                return Err(format!(
                    "pinned memory limit not applied: set {m}M, daemon reports {reply:?}"
                ));
            }
            mem = Some(got);
        }
        Ok((pct, mem))
    }

    /// Probes every `probeInterval`; returns why the daemon is considered dead.
    /// After each successful probe the client watcher runs a pass on the server list.
    async fn probe_until_failure(
        &self,
        env: &ControlEnv,
        pid: i32,
        watcher: &mut Watcher,
    ) -> String {
        loop {
            let t = *self.timing.borrow();
            tokio::time::sleep(t.probe_interval).await;
            if !process::is_alive(pid) {
                return format!("control daemon (pid {pid}) exited");
            }
            let to = t.command_timeout.min(t.probe_interval);
            let servers = match env.send("get_server_list", to).await {
                Ok(s) => s,
                Err(e) => return format!("health probe failed: {e}"),
            };
            let settings = self.enforce.borrow().clone();
            if watcher.settings != settings {
                watcher.settings = settings;
            }
            watcher
                .pass(env, &self.board, &servers, t.command_timeout)
                .await;
        }
    }

    /// Kills the daemon named by the pid file (if it is an MPS control process) and empties the
    /// pipe directory, so that a new `-d` can start there.
    async fn kill_daemon(&self) {
        let started = self.started.swap(0, Ordering::Relaxed);
        let from_file = process::read_pid(&self.layout.pid_file());
        let candidates = [
            from_file,
            Some(started).filter(|p| *p > 0 && Some(*p) != from_file),
        ];
        for pid in candidates.into_iter().flatten() {
            if process::is_alive(pid) {
                if process::looks_like_mps_control(pid) {
                    if !process::terminate(pid, KILL_GRACE).await {
                        tracing::error!(gpu = %self.plan.uuid, pid, "control daemon survived SIGKILL");
                    }
                } else {
                    tracing::warn!(gpu = %self.plan.uuid, pid, "pid file names a process that is not an MPS control daemon; not signalling it");
                }
            }
        }
        if let Err(e) = layout::clean_dir(&self.layout.pipe) {
            tracing::warn!(gpu = %self.plan.uuid, error = %e, "cannot clean pipe directory");
        }
    }

    /// Not ready, `quit`, wait (bounded), kill if needed, undo mounts/dirs/compute mode.
    async fn shutdown(&self, env: &ControlEnv, mut undo: Undo) {
        let uuid = &self.plan.uuid;
        let _ = layout::remove_file_if_exists(&self.layout.ready);
        self.set_state(GpuState::Stopping, None);
        let t = *self.timing.borrow();
        if let Some(pid) = self.daemon_pid().filter(|p| process::is_alive(*p)) {
            match env.send("quit", t.command_timeout).await {
                Ok(_) if process::wait_gone(pid, t.shutdown_timeout).await => {
                    tracing::info!(gpu = %uuid, pid, "control daemon quit");
                }
                r => {
                    tracing::warn!(gpu = %uuid, pid, error = ?r.err(), "control daemon did not quit; killing it")
                }
            }
        }
        self.kill_daemon().await;
        if undo.mounted {
            if let Err(e) = shm::unmount(&self.layout.shm) {
                tracing::warn!(gpu = %uuid, error = %e, "cannot unmount shm");
            }
        }
        if let Some(prev) = undo
            .prev_mode
            .filter(|m| *m != ComputeMode::ExclusiveProcess)
        {
            if let Err(e) = self.compute.set_compute_mode(uuid, prev) {
                tracing::warn!(gpu = %uuid, error = %e, "cannot restore the compute mode");
            }
        }
        for e in undo.dirs.remove_all() {
            tracing::warn!(gpu = %uuid, error = %e, "cleanup");
        }
        self.board.remove(uuid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_is_capped() {
        let max = Duration::from_secs(2);
        assert_eq!(backoff(1, max), Duration::from_millis(100));
        assert_eq!(backoff(2, max), Duration::from_millis(200));
        assert_eq!(backoff(4, max), Duration::from_millis(800));
        assert_eq!(backoff(10, max), max);
        assert_eq!(backoff(u32::MAX, max), max);
    }
}
