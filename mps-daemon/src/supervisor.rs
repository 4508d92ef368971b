//! One task per GPU: start the control daemon, apply limits, mark ready, probe, restart.
//!
//! The order matters and is the point of this daemon: a GPU is marked ready (ready file, `/readyz`)
//! only after the limits were set AND read back from the daemon, so a client that waits for the
//! ready file can never connect to an unlimited daemon. Any failed probe (process gone, socket
//! refusing, no reply within the bound) removes the ready file first, then kills and restarts the
//! daemon with exponential backoff; limits are applied again before it is ready again.
//!
//! From before a daemon starts (or a running one is found dead) until its limits are read back,
//! the GPU is PROHIBITED ([`crate::fence`]), EXCLUSIVE_PROCESS just before the ready file; one
//! whose restarts keep failing stays PROHIBITED (refused, never unlimited) until a restart
//! succeeds or the GPU is stopped, which restores the admin's mode.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::control::ControlEnv;
use crate::daemon_proc::{self, DaemonProc};
use crate::fence::ComputeFence;
use crate::inventory::ComputeModeSetter;
use crate::layout::{self, BlockingError, CreatedDirs, GpuLayout};
use crate::limits::{Limits, LimitsError, Source};
use crate::plan::{GpuPlan, Timing};
use crate::restart::{backoff, Handover, Stop};
use crate::settings::EnforceSettings;
use crate::shm::{self, ShmError};
use crate::status::{now_secs, Board, GpuState, GpuStatus};
use crate::watcher::Watcher;

/// A ready period at least this long resets the backoff.
const STABLE_AFTER: Duration = Duration::from_secs(10);
/// How long a killed daemon gets between SIGTERM and SIGKILL.
pub(crate) const KILL_GRACE: Duration = Duration::from_secs(1);

/// Why a control daemon could not be brought up; each message is its cause's own (it goes to
/// the status file's `error` as it is).
#[derive(Debug, thiserror::Error)]
pub enum BringUpError {
    #[error(transparent)]
    Dir(#[from] std::io::Error),
    #[error(transparent)]
    Shm(#[from] ShmError),
    #[error(transparent)]
    Blocking(#[from] BlockingError),
    #[error(transparent)]
    Control(#[from] crate::control::ControlError),
    #[error(transparent)]
    Limits(#[from] LimitsError),
    #[error("{0}")]
    ComputeMode(String),
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
    pub handover: Handover,
}

/// What the supervisor set up and must undo.
#[derive(Debug)]
struct Undo {
    dirs: CreatedDirs,
    mounted: bool,
    fence: ComputeFence,
}

impl GpuSupervisor {
    pub fn new(
        plan: GpuPlan,
        mps_root: &std::path::Path,
        board: Board,
        timing: watch::Receiver<Timing>,
        compute: Arc<dyn ComputeModeSetter>,
        enforce: watch::Receiver<EnforceSettings>,
        handover: Handover,
    ) -> Self {
        let layout = GpuLayout::new(mps_root, &plan.uuid);
        GpuSupervisor {
            plan,
            layout,
            board,
            timing,
            compute,
            enforce,
            handover,
        }
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

    /// Compute mode PROHIBITED (see [`crate::fence`]); a failure is logged by the fence and
    /// joined to `why` (or alone) in the status' lastError; the caller goes on either way.
    async fn prohibit(&self, fence: &mut ComputeFence, state: GpuState, why: Option<String>) {
        let to = self.timing.borrow().command_timeout;
        let last = self.board.get(&self.plan.uuid).and_then(|s| s.last_error);
        let error = match (why, fence.prohibit(to).await) {
            (Some(w), Some(e)) => Some(format!("{w}; {e}")),
            // The same failure again (the bring-up after a crash): keep the crash's reason.
            (None, Some(e)) if last.is_some_and(|l| l.ends_with(&e)) => None,
            (w, e) => w.or(e),
        };
        self.set_state(state, error);
    }

    /// The limits of this GPU's servers.
    pub(crate) fn limits(&self) -> Limits {
        Limits {
            active_thread_percentage: self.plan.active_thread_percentage,
            pinned_memory_limit_mib: self.plan.pinned_memory_limit_mib,
        }
    }

    /// Runs until `stop` changes (or its sender is dropped), then shuts the daemon down and
    /// removes what it created.
    pub async fn run(self, mut stop: watch::Receiver<Stop>) {
        let uuid = self.plan.uuid.clone();
        self.board.insert(self.initial_status());
        let mut undo = Undo {
            dirs: CreatedDirs::default(),
            mounted: false,
            fence: ComputeFence::new(self.compute.clone(), &uuid)
                .with_admin(self.handover.take(&uuid)),
        };
        let mut failures: u32 = 0;
        let env = self.env();
        let limits = self.limits();
        let mut watcher = Watcher::new(
            &uuid,
            self.enforce.borrow().clone(),
            (
                limits.active_thread_percentage,
                limits.pinned_memory_limit_mib,
            ),
        );
        watcher.client_log = Some(crate::users::ClientLog::new(
            self.layout.log.join("control.log"),
        ));
        let mut current: Option<DaemonProc> = None;
        loop {
            self.set_state(GpuState::Starting, None);
            let up = tokio::select! {
                r = self.bring_up(&env, &mut undo) => r,
                _ = stop.changed() => break,
            };
            match up {
                Ok(daemon) => {
                    let since = Instant::now();
                    let pid = daemon.id.pid;
                    tracing::info!(gpu = %uuid, pid, "control daemon ready");
                    watcher.reset();
                    let d = current.insert(daemon);
                    let reason = tokio::select! {
                        r = self.probe_until_failure(&env, d, &mut watcher) => r,
                        _ = stop.changed() => break,
                    };
                    tracing::warn!(gpu = %uuid, pid, reason = %reason, "control daemon unhealthy; restarting");
                    // No CUDA process on the GPU until the replacement's limits are read back.
                    let state = GpuState::Restarting;
                    self.prohibit(&mut undo.fence, state, Some(reason)).await;
                    self.remove_ready().await;
                    if since.elapsed() >= STABLE_AFTER {
                        failures = 0;
                    }
                }
                Err(e) => {
                    self.remove_ready().await;
                    tracing::error!(gpu = %uuid, error = %e, "bringing up the control daemon failed");
                    self.set_state(GpuState::Failed, Some(e.to_string()));
                }
            }
            self.stop_daemon(current.take()).await;
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
        let kind = *stop.borrow();
        self.shutdown(&env, current.take(), undo, kind).await;
    }

    async fn remove_ready(&self) {
        let ready = self.layout.ready.clone();
        let to = self.timing.borrow().command_timeout;
        if let Err(e) = layout::blocking("removing the ready file", to, move || {
            layout::remove_file_if_exists(&ready)
        })
        .await
        {
            tracing::warn!(gpu = %self.plan.uuid, error = %e, "cannot remove the ready file");
        }
    }

    /// Empties the pipe directory (bounded: a tenant may have filled it).
    async fn clean_pipe(&self) -> Result<(), BlockingError> {
        let pipe = self.layout.pipe.clone();
        let to = self.timing.borrow().start_timeout;
        layout::blocking("emptying the pipe directory", to, move || {
            layout::clean_dir(&pipe)
        })
        .await
    }

    /// Directories, tmpfs, compute mode, daemon start, limits, read-back, ready file.
    async fn bring_up(
        &self,
        env: &ControlEnv,
        undo: &mut Undo,
    ) -> Result<DaemonProc, BringUpError> {
        let l = &self.layout;
        let t = *self.timing.borrow();
        self.prohibit(&mut undo.fence, GpuState::Starting, None)
            .await;
        // A ready file left by an instance that was killed must not outlive this bring-up.
        self.remove_ready().await;
        for d in [&l.pipe, &l.log] {
            undo.dirs.ensure(d, 0o755)?;
        }
        if let Some(size) = self.plan.shm_size {
            undo.dirs.ensure(&l.shm, 0o1777)?;
            if !undo.mounted {
                if !shm::is_mount_point(&l.shm) {
                    shm::mount_tmpfs(&l.shm, size)?;
                }
                undo.mounted = true;
            }
        }
        daemon_proc::stop_stale(l, &self.plan.uuid, KILL_GRACE).await;
        self.clean_pipe().await?;
        let daemon = DaemonProc::start(env, l, t.start_timeout).await?;
        let pid = daemon.id.pid;
        self.board.update(&self.plan.uuid, |s| s.pid = Some(pid));
        let published = self
            .publish_ready(env, &mut undo.fence, pid, t.command_timeout)
            .await;
        match published {
            Ok(()) => Ok(daemon),
            Err(e) => {
                daemon.stop(KILL_GRACE).await;
                Err(e)
            }
        }
    }

    /// Applies and reads back the limits, allows the MPS server's context (EXCLUSIVE_PROCESS),
    /// then writes the ready file and marks the GPU ready.
    async fn publish_ready(
        &self,
        env: &ControlEnv,
        fence: &mut ComputeFence,
        pid: i32,
        to: Duration,
    ) -> Result<(), BringUpError> {
        let (got, source) = self.limits().ensure_defaults(env, to).await?;
        if source == Source::Commands {
            tracing::warn!(gpu = %self.plan.uuid, pid,
                "the control daemon ignored CUDA_MPS_ACTIVE_THREAD_PERCENTAGE / CUDA_MPS_PINNED_DEVICE_MEM_LIMIT in its environment; limits set by command instead, clients that connected in the meantime may have none");
        }
        fence
            .allow_mps(to)
            .await
            .map_err(BringUpError::ComputeMode)?;
        let ready = serde_json::json!({
            "uuid": self.plan.uuid,
            "pid": pid,
            "supervisorPid": std::process::id(),
            "activeThreadPercentage": got.active_thread_percentage,
            "pinnedMemoryLimitMiB": got.pinned_memory_limit_mib,
            "pipeDirectory": self.layout.pipe,
            "clientUser": self.plan.client_user,
        });
        let path = self.layout.ready.clone();
        layout::blocking("writing the ready file", to, move || {
            gpuhook_fs::write_atomic(&path, ready.to_string().as_bytes(), 0o644)
        })
        .await?;
        self.board.update(&self.plan.uuid, |s| {
            s.state = GpuState::Ready;
            s.ready_since = Some(now_secs());
            s.applied_active_thread_percentage = Some(got.active_thread_percentage);
            s.applied_pinned_memory_limit_mib = got.pinned_memory_limit_mib;
        });
        Ok(())
    }

    /// Stops the daemon we run (if any) and empties the pipe directory, so that a new daemon
    /// can start there.
    async fn stop_daemon(&self, daemon: Option<DaemonProc>) {
        if let Some(d) = daemon {
            let pid = d.id.pid;
            if !d.stop(KILL_GRACE).await {
                tracing::error!(gpu = %self.plan.uuid, pid, "control daemon survived SIGKILL");
            }
        }
        if let Err(e) = self.clean_pipe().await {
            tracing::warn!(gpu = %self.plan.uuid, error = %e, "cannot clean pipe directory");
        }
    }

    /// Not ready, `quit`, wait (bounded), kill if needed, undo mounts/dirs/compute mode.
    async fn shutdown(
        &self,
        env: &ControlEnv,
        mut daemon: Option<DaemonProc>,
        mut undo: Undo,
        stop: Stop,
    ) {
        let (uuid, t, ho) = (&self.plan.uuid, *self.timing.borrow(), &self.handover);
        let to = t.command_timeout;
        ho.before_quit(&mut undo.fence, stop, to).await;
        self.remove_ready().await;
        self.set_state(GpuState::Stopping, None);
        if let Some(d) = daemon.as_mut() {
            let pid = d.id.pid;
            if d.exited().is_none() {
                match env.send("quit", t.command_timeout).await {
                    Ok(_) if d.wait_exit(t.shutdown_timeout).await => {
                        tracing::info!(gpu = %uuid, pid, "control daemon quit");
                    }
                    r => {
                        tracing::warn!(gpu = %uuid, pid, error = ?r.err(), "control daemon did not quit; killing it")
                    }
                }
            }
        }
        self.stop_daemon(daemon).await;
        if undo.mounted {
            if let Err(e) = shm::unmount(&self.layout.shm) {
                tracing::warn!(gpu = %uuid, error = %e, "cannot unmount shm");
            }
        }
        // The admin's mode, whatever we set last (never PROHIBITED left behind by a stop).
        ho.finish(&mut undo.fence, uuid, stop, to).await;
        for e in undo.dirs.remove_all() {
            tracing::warn!(gpu = %uuid, error = %e, "cleanup");
        }
        self.board.remove(uuid);
    }
}
