//! The server limits of one GPU: applying them, reading them back, and noticing drift.
//!
//! The limits reach the control daemon three ways: in its environment from its first moment
//! ([`crate::control::ControlEnv::daemon_envs`]), by `set_default_*` before the GPU is ready,
//! and by a read-back (`get_default_*`) that must match before the ready file is written. Anyone
//! who can reach the pipe directory (every MPS tenant) can send `set_default_*` too, so the
//! supervisor reads the defaults back with every probe and restores them when they drifted
//! ([`check_defaults`]); the watcher does the same per server.

use std::time::Duration;

use crate::control::{parse_mem_limit_mib, parse_percentage, ControlEnv, ControlError};
use gpuhook_node::bounded::preview;

/// Why the limits could not be read back or applied.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LimitsError {
    /// The reply to the `get_*` commands (cut for the message) is not what they print.
    #[error("unexpected limits reply {0:?}")]
    Reply(String),
    #[error(transparent)]
    Control(#[from] ControlError),
    /// Read back after setting, they still differ (how).
    #[error("limits not applied: {0}")]
    NotApplied(String),
}

/// What a GPU's servers must be limited to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub active_thread_percentage: u32,
    pub pinned_memory_limit_mib: Option<u64>,
}

/// Values read back from the daemon.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReadBack {
    pub active_thread_percentage: f64,
    pub pinned_memory_limit_mib: Option<u64>,
}

impl Limits {
    /// `set_...` commands for the defaults (`None`) or one server, device by ordinal 0:
    /// CUDA_VISIBLE_DEVICES leaves the daemon one GPU, and some drivers ignored limits by UUID.
    pub fn set_commands(&self, server: Option<u32>) -> String {
        let pct = self.active_thread_percentage;
        let mut cmd = match server {
            None => format!("set_default_active_thread_percentage {pct}"),
            Some(s) => format!("set_active_thread_percentage {s} {pct}"),
        };
        if let Some(m) = self.pinned_memory_limit_mib {
            match server {
                None => cmd.push_str(&format!("\nset_default_device_pinned_mem_limit 0 {m}M")),
                Some(s) => cmd.push_str(&format!("\nset_device_pinned_mem_limit {s} 0 {m}M")),
            }
        }
        cmd
    }

    /// The `get_...` commands matching [`Limits::set_commands`], in one client run.
    pub fn get_commands(&self, server: Option<u32>) -> String {
        let mut cmd = match server {
            None => "get_default_active_thread_percentage".to_string(),
            Some(s) => format!("get_active_thread_percentage {s}"),
        };
        if self.pinned_memory_limit_mib.is_some() {
            match server {
                None => cmd.push_str("\nget_default_device_pinned_mem_limit 0"),
                Some(s) => cmd.push_str(&format!("\nget_device_pinned_mem_limit {s} 0")),
            }
        }
        cmd
    }

    /// Parses the reply of [`Limits::get_commands`] (one line per command).
    pub fn parse_reply(&self, reply: &str) -> Result<ReadBack, LimitsError> {
        let bad = || LimitsError::Reply(preview(reply));
        let mut lines = reply.lines().map(str::trim).filter(|l| !l.is_empty());
        let pct = lines.next().and_then(parse_percentage).ok_or_else(bad)?;
        let mem = match self.pinned_memory_limit_mib {
            None => None,
            Some(_) => Some(lines.next().and_then(parse_mem_limit_mib).ok_or_else(bad)?),
        };
        Ok(ReadBack {
            active_thread_percentage: pct,
            pinned_memory_limit_mib: mem,
        })
    }

    /// A description of how `got` differs from these limits, `None` when it matches.
    pub fn mismatch(&self, got: &ReadBack) -> Option<String> {
        let want = self.active_thread_percentage;
        if (got.active_thread_percentage - f64::from(want)).abs() > 0.5 {
            return Some(format!(
                "active thread percentage is {}, want {want}",
                got.active_thread_percentage
            ));
        }
        if got.pinned_memory_limit_mib != self.pinned_memory_limit_mib {
            return Some(format!(
                "pinned memory limit is {:?} MiB, want {:?} MiB",
                got.pinned_memory_limit_mib, self.pinned_memory_limit_mib
            ));
        }
        None
    }

    /// Reads the limits of the defaults (`None`) or of one server.
    pub async fn read(
        &self,
        env: &ControlEnv,
        server: Option<u32>,
        to: Duration,
    ) -> Result<ReadBack, ControlError> {
        let reply = env.send(&self.get_commands(server), to).await?;
        self.parse_reply(&reply).map_err(|e| ControlError::Failed {
            command: self.get_commands(server).replace('\n', "; "),
            code: None,
            output: e.to_string(),
        })
    }

    /// Sets the defaults and reads them back; an error unless they match.
    pub async fn apply_defaults(
        &self,
        env: &ControlEnv,
        to: Duration,
    ) -> Result<ReadBack, LimitsError> {
        // Replies are not relied upon; the values are read back.
        env.send(&self.set_commands(None), to).await?;
        let got = self.read(env, None, to).await?;
        match self.mismatch(&got) {
            Some(m) => Err(LimitsError::NotApplied(m)),
            None => Ok(got),
        }
    }
}

/// How the defaults came to be in force at start-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// From the daemon's environment: in force before any client could connect.
    Environment,
    /// Only through `set_default_*`: the control daemon ignored its environment, so a client
    /// that connected between its start and now may have got the old defaults.
    Commands,
}

impl Limits {
    /// Makes sure a freshly started daemon has these defaults: read back first (the daemon's
    /// environment should have set them already: one command), else set them and read back.
    pub async fn ensure_defaults(
        &self,
        env: &ControlEnv,
        to: Duration,
    ) -> Result<(ReadBack, Source), LimitsError> {
        let got = self.read(env, None, to).await?;
        if self.mismatch(&got).is_none() {
            return Ok((got, Source::Environment));
        }
        Ok((self.apply_defaults(env, to).await?, Source::Commands))
    }
}

/// What a drift check found.
#[derive(Debug, Clone, PartialEq)]
pub enum Drift {
    /// The limits are as configured.
    None,
    /// They had drifted (description) and were restored.
    Restored(String),
}

/// Reads the defaults back and restores them when they drifted. Errors are those of the
/// commands (the caller decides whether they mean the daemon is dead).
pub async fn check_defaults(
    limits: &Limits,
    env: &ControlEnv,
    to: Duration,
) -> Result<Drift, ControlError> {
    let got = limits.read(env, None, to).await?;
    let Some(what) = limits.mismatch(&got) else {
        return Ok(Drift::None);
    };
    env.send(&limits.set_commands(None), to).await?;
    let again = limits.read(env, None, to).await?;
    match limits.mismatch(&again) {
        None => Ok(Drift::Restored(what)),
        Some(m) => Err(ControlError::Failed {
            command: "restore default limits".into(),
            code: None,
            output: m,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_and_replies() {
        let l = Limits {
            active_thread_percentage: 25,
            pinned_memory_limit_mib: Some(20480),
        };
        assert_eq!(
            l.set_commands(Some(7)),
            "set_active_thread_percentage 7 25\nset_device_pinned_mem_limit 7 0 20480M"
        );
        assert_eq!(
            l.get_commands(None),
            "get_default_active_thread_percentage\nget_default_device_pinned_mem_limit 0"
        );
        let ok = l.parse_reply("25.0\n20480M").unwrap();
        assert_eq!(l.mismatch(&ok), None);
        let drifted = l.parse_reply("100.0\n20480M").unwrap();
        assert!(l.mismatch(&drifted).unwrap().contains("is 100"));
        let mem = l.parse_reply("25.0\n0M").unwrap();
        assert!(l.mismatch(&mem).unwrap().contains("pinned"));
        assert!(l.parse_reply("25.0").is_err());
        let long = "x".repeat(10_000);
        assert!(
            l.parse_reply(&long).unwrap_err().to_string().len() < 400,
            "echo is clipped"
        );
    }
}
