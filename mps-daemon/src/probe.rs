//! The health probe of one ready GPU, run every `probeInterval`.
//!
//! A probe fails (and the daemon is restarted) only on evidence about the daemon: our child
//! exited, its control socket is gone or served by another process (a tenant can replace files
//! in the pipe directory), or it does not answer within the bound. A failure of our own side
//! (no free fd, no memory, cannot fork: [`ControlError::is_local`]) says nothing about the daemon
//! and must not kill a healthy one: it is counted (`probesInconclusive`) and logged, and the next
//! probe tries again. Each probe also reads the default limits back and restores them when a
//! tenant changed them ([`crate::limits::check_defaults`]).

use crate::control::{ControlEnv, ControlError};
use crate::daemon_proc::DaemonProc;
use crate::limits::{check_defaults, Drift};
use gpuhook_node::bounded::preview;

use crate::safefs::{self, Listener};
use crate::supervisor::GpuSupervisor;
use crate::watcher::Watcher;

/// Scope label of drift in the GPU's defaults (the watcher uses `server`).
pub const DRIFT_DEFAULT: &str = "default";

impl GpuSupervisor {
    fn inconclusive(&self, what: &str, error: &dyn std::fmt::Display) {
        let error = preview(&error.to_string());
        tracing::warn!(gpu = %self.plan.uuid, error = %error, "{what}: probe inconclusive (not a daemon failure)");
        self.board
            .update(&self.plan.uuid, |s| s.usage.probes_inconclusive += 1);
    }

    /// Probes every `probeInterval` and wakes at once when the daemon exits; returns why the
    /// daemon is considered dead.
    /// After each successful probe the client watcher runs a pass on the server list.
    pub(crate) async fn probe_until_failure(
        &self,
        env: &ControlEnv,
        daemon: &mut DaemonProc,
        watcher: &mut Watcher,
    ) -> String {
        let pid = daemon.id.pid;
        let sock = self.layout.control_socket();
        loop {
            let t = *self.timing.borrow();
            // A crash is noticed when it happens (the child's pidfd), not at the next probe.
            tokio::select! {
                _ = tokio::time::sleep(t.probe_interval) => {}
                reason = daemon.died() => return reason,
            }
            if let Some(reason) = daemon.exited() {
                return reason;
            }
            let to = t.command_timeout.min(t.probe_interval);
            match safefs::socket_listener(&sock, to).await {
                Ok(Listener::Pid(p)) if p == pid => {}
                Ok(Listener::Pid(p)) => {
                    return format!(
                    "control socket {} is served by pid {p}, not by the control daemon (pid {pid})",
                    sock.display()
                )
                }
                Ok(Listener::Absent) => {
                    return format!("control socket {} is gone", sock.display())
                }
                Err(e) => {
                    self.inconclusive("cannot check the control socket", &e);
                    continue;
                }
            }
            let servers = match env.send("get_server_list", to).await {
                Ok(s) => s,
                Err(e) if e.is_local() => {
                    self.inconclusive("cannot run the health probe", &e);
                    continue;
                }
                Err(e) => return format!("health probe failed: {e}"),
            };
            if let Err(e) = self.check_drift(env, to).await {
                if !e.is_local() {
                    return format!("limits read-back failed: {e}");
                }
                self.inconclusive("cannot read the limits back", &e);
            }
            let settings = self.enforce.borrow().clone();
            if watcher.settings != settings {
                watcher.settings = settings;
            }
            watcher
                .pass(env, &self.board, &servers, t.command_timeout)
                .await;
        }
    }

    async fn check_drift(
        &self,
        env: &ControlEnv,
        to: std::time::Duration,
    ) -> Result<(), ControlError> {
        if let Drift::Restored(what) = check_defaults(&self.limits(), env, to).await? {
            tracing::warn!(gpu = %self.plan.uuid, scope = DRIFT_DEFAULT, drift = %what,
                "default MPS limits were changed through the pipe directory; restored");
            self.board.update(&self.plan.uuid, |s| {
                *s.usage
                    .limit_drifts
                    .entry(DRIFT_DEFAULT.to_string())
                    .or_insert(0) += 1;
            });
        }
        Ok(())
    }
}
