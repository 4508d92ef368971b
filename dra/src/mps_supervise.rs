//! Supervision of a prepared claim's MPS control daemon (a plain claim's own, or a GPU's shared
//! daemon of consumable-capacity shares), with gpu-mps-daemon's building blocks: its compute-mode
//! fence (`gpu_mps_daemon::fence`), its child daemon (`DaemonProc`, whose exit wakes us through
//! tokio's pidfd reaper), its restart backoff (`restart::backoff`).
//!
//! When the daemon dies while its claim is prepared: the ready marker goes first (the start check
//! refuses the claim's new containers), its GPUs are set to compute mode PROHIBITED (a CUDA
//! process of a running container that finds no daemon would run "as it normally would without
//! MPS", `nvidia-cuda-mps-control(1)`, i.e. unlimited; PROHIBITED allows no context: CUDA Driver
//! API `CUcomputemode`), then a replacement starts in the same dirs (the pipe dir emptied, not
//! replaced: it is bind-mounted in the running containers) with the same environment, its limits
//! are read back, the GPUs go back to EXCLUSIVE_PROCESS and the marker is written again. A failed
//! attempt is retried with backoff; meanwhile the marker stays absent and the GPUs PROHIBITED.
//!
//! A daemon of an earlier run of the plugin (not our child) is adopted when its identity record
//! (pid and start time) still names a live process, and watched every [`WATCH_EVERY`]; one found
//! dead is restarted at once.
//!
//! Stop (unprepare): supervision ends first, then the daemon, then the compute mode recorded
//! before the claim is restored (`mps_node::restore`: never PROHIBITED left behind). Detach
//! (plugin shutdown): the daemon keeps running for its containers.

use std::sync::Arc;
use std::time::Duration;

use gpu_mps_daemon::daemon_proc::{self, DaemonProc};
use gpu_mps_daemon::fence::ComputeFence;
use gpu_mps_daemon::process::Identity;
use gpu_mps_daemon::restart::backoff;
use tokio::sync::{watch, Mutex};
use tokio::task::JoinHandle;

use crate::mps::{check, env, ClaimMps, MpsOptions};
use crate::mps_node;

/// How often an adopted daemon (not our child) is checked.
pub const WATCH_EVERY: Duration = Duration::from_secs(1);
/// Longest delay between two failed restarts.
pub const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// A daemon up at least this long resets the backoff.
const STABLE_AFTER: Duration = Duration::from_secs(10);
/// Between SIGTERM and SIGKILL.
const KILL_GRACE: Duration = Duration::from_secs(1);

/// The daemon under supervision.
#[derive(Debug)]
pub enum Proc {
    /// Started by this run.
    Child(Box<DaemonProc>),
    /// Started by an earlier run, identity-checked.
    Adopted(Identity),
    /// Found dead: restarted at once.
    Dead,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cmd {
    Run,
    Stop,
    Detach,
}

/// A supervised daemon.
#[derive(Debug)]
pub struct Supervised {
    pub layout: gpu_mps_daemon::layout::GpuLayout,
    /// The limits a restart starts with; held during a restart attempt (a shared daemon's
    /// ceiling is changed under it).
    pub want: Arc<Mutex<ClaimMps>>,
    cmd: watch::Sender<Cmd>,
    task: JoinHandle<Option<DaemonProc>>,
}

impl Supervised {
    /// Supervises `proc`, the daemon of `layout` running with `want`.
    pub fn spawn(
        opts: &MpsOptions,
        layout: gpu_mps_daemon::layout::GpuLayout,
        want: ClaimMps,
        proc: Proc,
    ) -> Self {
        let want = Arc::new(Mutex::new(want));
        let (cmd, rx) = watch::channel(Cmd::Run);
        let sup = Sup {
            opts: opts.clone(),
            layout: layout.clone(),
            want: want.clone(),
        };
        let task = tokio::spawn(sup.run(proc, rx));
        Supervised {
            layout,
            want,
            cmd,
            task,
        }
    }

    /// Ends supervision, then stops the daemon and restores the GPUs' compute mode.
    pub async fn stop(self) {
        self.cmd.send_replace(Cmd::Stop);
        let _ = self.task.await;
    }

    /// Ends supervision; the daemon keeps running (for the next run of the plugin).
    pub async fn detach(self) {
        self.cmd.send_replace(Cmd::Detach);
        if let Ok(Some(d)) = self.task.await {
            // Dropping our child would kill it (kill_on_drop).
            std::mem::forget(d);
        }
    }
}

struct Sup {
    opts: MpsOptions,
    layout: gpu_mps_daemon::layout::GpuLayout,
    want: Arc<Mutex<ClaimMps>>,
}

/// Resolves when the daemon is gone, with why.
async fn gone(proc: &mut Proc) -> String {
    match proc {
        Proc::Child(d) => d.died().await,
        Proc::Adopted(id) => loop {
            tokio::time::sleep(WATCH_EVERY).await;
            if !mps_node::alive(*id) {
                return format!("control daemon (pid {}) of an earlier run is gone", id.pid);
            }
        },
        Proc::Dead => "control daemon found dead".to_string(),
    }
}

impl Sup {
    fn name(&self) -> String {
        self.layout.dir.display().to_string()
    }

    async fn fences(&self) -> Vec<ComputeFence> {
        let uuids = self.want.lock().await.uuids.clone();
        let c = &self.opts.compute;
        uuids
            .iter()
            .map(|u| ComputeFence::new(c.clone(), u))
            .collect()
    }

    /// Until stopped or detached; returns our child on a detach.
    async fn run(self, mut proc: Proc, mut cmd: watch::Receiver<Cmd>) -> Option<DaemonProc> {
        let mut fences = self.fences().await;
        // Restarts since the daemon was last up for STABLE_AFTER: the backoff's exponent.
        let mut restarts: u32 = 0;
        if matches!(proc, Proc::Adopted(_)) && !self.layout.ready.exists() {
            self.mark_adopted(&proc).await;
        }
        'outer: loop {
            let since = tokio::time::Instant::now();
            let why = tokio::select! {
                w = gone(&mut proc) => w,
                _ = cmd.changed() => break,
            };
            // The window: not ready, no CUDA context on the GPUs until the limits are back.
            mps_node::remove_ready(&self.layout);
            let to = self.opts.command_timeout;
            for f in &mut fences {
                f.prohibit(to).await;
            }
            tracing::error!(dir = %self.name(), reason = %why, "MPS control daemon gone; its GPUs are PROHIBITED and its claims' new containers refused until it is restarted");
            if since.elapsed() >= STABLE_AFTER {
                restarts = 0;
            }
            proc = Proc::Dead;
            loop {
                if restarts > 0 {
                    let delay = backoff(restarts, MAX_BACKOFF);
                    tokio::select! {
                        () = tokio::time::sleep(delay) => {}
                        _ = cmd.changed() => break 'outer,
                    }
                }
                let r = tokio::select! {
                    r = self.restart(&mut fences) => r,
                    _ = cmd.changed() => break 'outer,
                };
                match r {
                    Ok(d) => {
                        tracing::info!(dir = %self.name(), pid = d.id.pid, "MPS control daemon restarted with its claims' limits");
                        proc = Proc::Child(Box::new(d));
                        // A quick death again waits its backoff.
                        restarts += 1;
                        break;
                    }
                    Err(e) => {
                        restarts += 1;
                        tracing::error!(dir = %self.name(), error = %e, restarts, "restarting the MPS control daemon failed; its GPUs stay PROHIBITED");
                    }
                }
            }
        }
        let last = *cmd.borrow();
        self.finish(proc, last).await
    }

    /// A live adopted daemon without a ready marker (an earlier version's, or one whose marker
    /// a failed restart removed): marked ready once its limits read back.
    async fn mark_adopted(&self, proc: &Proc) {
        let Proc::Adopted(id) = proc else { return };
        let want = self.want.lock().await;
        let env = env(&self.opts, &self.layout, &want);
        match check(&env, &want, self.opts.command_timeout).await {
            Ok(()) => {
                let (pct, mem) = (want.active_thread_percentage, &want.pinned_limits_mib);
                if let Err(e) = mps_node::write_ready(&self.layout, id.pid, &want.uuids, pct, mem) {
                    tracing::warn!(dir = %self.name(), error = %e, "ready marker not written");
                }
            }
            Err(e) => {
                tracing::warn!(dir = %self.name(), error = %e, "adopted MPS daemon not marked ready")
            }
        }
    }

    /// One restart attempt in the claim's dirs with its limits; the GPUs leave PROHIBITED only
    /// after the read-back, then the marker is written.
    async fn restart(&self, fences: &mut [ComputeFence]) -> Result<DaemonProc, String> {
        let want = self.want.lock().await;
        let l = &self.layout;
        mps_node::remove_ready(l);
        daemon_proc::stop_stale(l, &self.name(), KILL_GRACE).await;
        // Kept when they exist (bind-mounted in running containers), made as at the start if not.
        let mut dirs = vec![(&l.pipe, 0o755), (&l.log, 0o755)];
        if self.opts.shm {
            dirs.push((&l.shm, 0o1777));
        }
        for (d, mode) in dirs {
            let mut made = gpu_mps_daemon::layout::CreatedDirs::default();
            made.ensure(d, mode)
                .map_err(|e| format!("{}: {e}", d.display()))?;
        }
        gpu_mps_daemon::layout::clean_dir(&l.pipe)
            .map_err(|e| format!("emptying {}: {e}", l.pipe.display()))?;
        let env = env(&self.opts, l, &want);
        let d = DaemonProc::start(&env, l, self.opts.start_timeout)
            .await
            .map_err(|e| e.to_string())?;
        let to = self.opts.command_timeout;
        let mut res = check(&env, &want, to)
            .await
            .map_err(|e| format!("limits not in force: {e}"));
        for f in fences.iter_mut() {
            if res.is_ok() {
                res = f.allow_mps(to).await;
            }
        }
        let (pct, mem) = (want.active_thread_percentage, &want.pinned_limits_mib);
        let res = res.and_then(|()| mps_node::write_ready(l, d.id.pid, &want.uuids, pct, mem));
        match res {
            Ok(()) => Ok(d),
            Err(e) => {
                mps_node::remove_ready(l);
                for f in fences.iter_mut() {
                    f.prohibit(to).await;
                }
                d.stop(KILL_GRACE).await;
                Err(e)
            }
        }
    }

    async fn finish(&self, proc: Proc, cmd: Cmd) -> Option<DaemonProc> {
        if cmd != Cmd::Stop {
            return match proc {
                Proc::Child(d) => Some(*d),
                _ => None,
            };
        }
        mps_node::remove_ready(&self.layout);
        match proc {
            Proc::Child(d) => {
                d.stop(self.opts.command_timeout).await;
            }
            _ => daemon_proc::stop_stale(&self.layout, &self.name(), KILL_GRACE).await,
        }
        mps_node::restore(self.opts.compute.as_ref(), &self.layout.dir);
        None
    }
}

/// `<daemon dir>/claim-mps.json`: a plain claim daemon's limits, so that a later run of the
/// plugin restarts it with them.
fn want_path(layout: &gpu_mps_daemon::layout::GpuLayout) -> std::path::PathBuf {
    layout.dir.join("claim-mps.json")
}

/// Records `want` for a later run (logged when it cannot: that run falls back to the marker).
pub fn record_want(layout: &gpu_mps_daemon::layout::GpuLayout, want: &ClaimMps) {
    let bytes = serde_json::to_vec(want).unwrap_or_default();
    if let Err(e) = gpuhook_fs::write_atomic(&want_path(layout), &bytes, 0o600) {
        tracing::warn!(dir = %layout.dir.display(), error = %e, "MPS limits not recorded; a later run restarts the daemon from its ready marker");
    }
}

/// The limits a daemon of an earlier run was started with: its record, else its ready marker.
pub fn recorded_want(layout: &gpu_mps_daemon::layout::GpuLayout) -> Option<ClaimMps> {
    const MAX: u64 = 64 << 10;
    let read = |p: &std::path::Path| gpuhook_node::bounded::read_bounded(p, MAX).ok();
    if let Some(w) = read(&want_path(layout)).and_then(|b| serde_json::from_slice(&b).ok()) {
        return Some(w);
    }
    let v: serde_json::Value = serde_json::from_slice(&read(&layout.ready)?).ok()?;
    let uuids = v["uuid"].as_str()?.split(',').map(str::to_string).collect();
    let pinned = v["pinnedMemoryLimitMiB"].as_array()?;
    Some(ClaimMps {
        uuids,
        active_thread_percentage: u32::try_from(v["activeThreadPercentage"].as_u64()?).ok()?,
        pinned_limits_mib: pinned.iter().map(serde_json::Value::as_u64).collect(),
        shared: false,
    })
}

/// The daemon an earlier run left at `layout`: adopted when its identity record (pid and start
/// time) names a live MPS control process, else dead (restarted at once).
pub fn found(layout: &gpu_mps_daemon::layout::GpuLayout) -> Proc {
    match mps_node::recorded(layout) {
        Some(id)
            if mps_node::alive(id) && gpu_mps_daemon::process::looks_like_mps_control(id.pid) =>
        {
            tracing::info!(dir = %layout.dir.display(), pid = id.pid, "adopting the MPS control daemon of an earlier run");
            Proc::Adopted(id)
        }
        _ => Proc::Dead,
    }
}

#[cfg(test)]
#[path = "mps_supervise_tests.rs"]
mod tests;
