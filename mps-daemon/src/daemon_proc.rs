//! The control daemon as our own child process (`nvidia-cuda-mps-control -f`).
//!
//! `-d` forks away and leaves only a pid file in the pipe directory, which every MPS tenant can
//! rewrite (to make us kill another GPU's daemon) or replace with a FIFO (to freeze us on
//! `read`). With `-f` the daemon is our child: its pid is what `spawn` returned, its exit is seen
//! with `waitpid` (no file, no fd needed, so fd exhaustion cannot fake a death), and it leads its
//! own process group (its MPS servers are in it), which is signalled while the leader is not yet
//! reaped, so the group id cannot have been reused.
//!
//! The daemon is up when its control socket exists AND the process listening on it is our child
//! (`SO_PEERCRED`): a socket a tenant planted in the pipe directory is not mistaken for it. Its
//! pid and start time are recorded under the GPU's private directory (never the pipe directory)
//! so that a later gpu-mps-daemon can stop a daemon left behind by one that was killed.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::time::Instant;

use crate::control::{ControlEnv, ControlError};
use crate::layout::{self, GpuLayout};
use crate::process::{self, Identity, PidFd};
use crate::safefs::{self, Listener};

/// Bound of the daemon's start-up error output we read back.
const ERR_MAX: u64 = 1 << 20;
/// Characters of that output put into an error.
const ERR_TAIL: usize = 2000;

/// A running control daemon that we started.
#[derive(Debug)]
pub struct DaemonProc {
    child: tokio::process::Child,
    pub id: Identity,
    record: PathBuf,
}

/// Where the identity of GPU `layout`'s daemon is recorded (private to us).
pub fn record_path(layout: &GpuLayout) -> PathBuf {
    layout.dir.join("control-daemon.id")
}

fn err_path(layout: &GpuLayout) -> PathBuf {
    layout.dir.join("control-daemon.err")
}

fn err_tail(path: &Path) -> String {
    match safefs::read_bounded(path, ERR_MAX) {
        Ok(b) => {
            let text = String::from_utf8_lossy(&b);
            let text = text.trim();
            let skip = text.chars().count().saturating_sub(ERR_TAIL);
            text.chars().skip(skip).collect()
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}

impl DaemonProc {
    /// Starts `-f` with `env`'s daemon environment and waits (until `timeout`) for our child to
    /// listen on the control socket. The pipe directory must have been emptied before.
    pub async fn start(
        env: &ControlEnv,
        layout: &GpuLayout,
        timeout: Duration,
    ) -> Result<DaemonProc, ControlError> {
        let deadline = Instant::now() + timeout;
        let err_path = err_path(layout);
        let err_file = safefs::create_private(&err_path)
            .map_err(|e| ControlError::Io(format!("cannot create {}: {e}", err_path.display())))?;
        let mut cmd = env.daemon_command()?;
        cmd.arg("-f")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err_file)
            .process_group(0)
            .kill_on_drop(true);
        let mut child = cmd.spawn().map_err(|e| env.spawn_err(e))?;
        let pid = child
            .id()
            .and_then(|p| i32::try_from(p).ok())
            .ok_or_else(|| ControlError::Io("the control daemon has no pid".into()))?;
        let started = |what: String| ControlError::StartFailed {
            code: None,
            output: what,
        };
        let sock = layout.control_socket();
        loop {
            match child.try_wait() {
                Ok(Some(st)) => {
                    return Err(ControlError::StartFailed {
                        code: st.code(),
                        output: err_tail(&err_path),
                    })
                }
                Ok(None) => {}
                Err(e) => return Err(started(format!("waiting for the control daemon: {e}"))),
            }
            if let Ok(Listener::Pid(p)) = safefs::socket_listener(&sock, timeout).await {
                if p == pid {
                    break;
                }
            }
            if Instant::now() >= deadline {
                let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
                let _ = child.wait().await;
                return Err(ControlError::StartTimeout {
                    timeout,
                    what: format!("pid {pid} does not listen on {}", sock.display()),
                });
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let id = Identity::of(pid).ok_or_else(|| started(format!("pid {pid} vanished")))?;
        let record = record_path(layout);
        if let Err(e) = gpuhook_fs::write_atomic(&record, id.to_record().as_bytes(), 0o644) {
            tracing::warn!(error = %e, "cannot record the control daemon's identity");
        }
        Ok(DaemonProc { child, id, record })
    }

    /// Why the daemon is gone, or `None` while it runs.
    pub fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(None) => None,
            Ok(Some(st)) => Some(format!(
                "control daemon (pid {}) exited ({st})",
                self.id.pid
            )),
            Err(e) => Some(format!("control daemon (pid {}): {e}", self.id.pid)),
        }
    }

    /// Resolves when the daemon exits, with why: tokio reaps our child through a pidfd (Linux
    /// 5.3+; SIGCHLD otherwise), so a crash wakes the supervisor at once instead of at the next
    /// probe. Cancel-safe: used in a `select!` beside the probe timer.
    pub async fn died(&mut self) -> String {
        match self.child.wait().await {
            Ok(st) => format!("control daemon (pid {}) exited ({st})", self.id.pid),
            Err(e) => format!("control daemon (pid {}): {e}", self.id.pid),
        }
    }

    /// Waits up to `timeout` for the daemon to exit by itself (after `quit`).
    pub async fn wait_exit(&mut self, timeout: Duration) -> bool {
        tokio::time::timeout(timeout, self.child.wait())
            .await
            .is_ok()
    }

    /// Ends the daemon and its process group: SIGTERM (and SIGCONT), `grace`, SIGKILL.
    /// True when it is gone; its record is removed either way.
    pub async fn stop(mut self, grace: Duration) -> bool {
        let pg = Pid::from_raw(self.id.pid);
        let mut gone = self.exited().is_some();
        if !gone {
            // The leader is unreaped until `wait` returns: the group id is still ours.
            let _ = killpg(pg, Signal::SIGTERM);
            let _ = killpg(pg, Signal::SIGCONT);
            gone = self.wait_exit(grace).await;
        }
        if !gone {
            let _ = killpg(pg, Signal::SIGKILL);
            gone = self.wait_exit(Duration::from_secs(2)).await;
        }
        let _ = layout::remove_file_if_exists(&self.record);
        gone
    }
}

/// Stops a daemon recorded by an earlier gpu-mps-daemon (killed before it could stop it): only
/// when the recorded pid still has the recorded start time and is an MPS control process.
pub async fn stop_stale(layout: &GpuLayout, uuid: &str, grace: Duration) {
    let record = record_path(layout);
    let id = safefs::read_bounded(&record, 64)
        .ok()
        .and_then(|b| Identity::parse_record(&String::from_utf8_lossy(&b)));
    if let Some(fd) = id.and_then(PidFd::open) {
        if process::looks_like_mps_control(fd.id.pid) {
            tracing::info!(gpu = %uuid, pid = fd.id.pid, "stopping a control daemon left by an earlier run");
            if !fd.terminate(grace).await {
                tracing::error!(gpu = %uuid, pid = fd.id.pid, "control daemon survived SIGKILL");
            }
        }
    }
    let _ = layout::remove_file_if_exists(&record);
}
