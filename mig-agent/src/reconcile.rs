//! One run for one value of `nvidia.com/mig.config`, in NVIDIA's order (k8s-mig-manager v0.15.0
//! `reconfigure.Run`): validate and plan (nothing paused yet) → `pending` → pause the GPU clients
//! that hold the GPUs being changed → wait for their processes to end → apply → refresh the CDI
//! spec and inventory → restore the clients → `success`.
//!
//! Unlike NVIDIA's, every path that paused restores, whatever failed (a client that never stops
//! included: mig-parted #485), and the previous label values are on the Node (an annotation
//! written in the same PATCH as the pause), so a run cut short by a crash is restored by the next
//! one. A failure sets `failed` with the reason (log, annotation, Warning Event); the agent
//! retries with backoff. A GPU that needs a mode change plus a reset or reboot is handled as
//! NVIDIA's manager does (`rebooting` with `--with-reboot`, and "did not take effect after
//! rebooting" if it still waits), and the Node remembers the reboot per config: never a reboot
//! loop.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::host::{Host, Proc};
use crate::labels::{
    orphaned_pauses, pause_for, Changes, Pause, State, CLIENTS, PAUSED_ANNOTATION,
    REASON_ANNOTATION, REBOOT_ANNOTATION, STATE_LABEL,
};
use crate::layout::{GpuRef, Layout};
use crate::node::{NodeApi, NodeMeta};

/// Longest failure reason kept in the annotation and the Event.
const MAX_REASON: usize = 1024;

/// How a run behaves.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Reboot the node when a MIG mode change waits for it (NVIDIA's `WITH_REBOOT`).
    pub with_reboot: bool,
    /// How long the paused clients get to stop (NVIDIA: 5 minutes).
    pub client_timeout: Duration,
    /// How often their processes are checked while waiting, and the pause between attempts to
    /// restore the labels.
    pub client_poll: Duration,
    /// Set on SIGTERM: a wait for clients ends at once (the labels are restored, the run fails)
    /// so that a pod being deleted leaves nothing paused.
    pub stop: Arc<AtomicBool>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            with_reboot: false,
            client_timeout: Duration::from_secs(300),
            client_poll: Duration::from_secs(1),
            stop: Arc::default(),
        }
    }
}

/// The parts a run uses.
pub struct Reconciler {
    pub api: Box<dyn NodeApi + Send>,
    pub layout: Box<dyn Layout + Send>,
    pub host: Box<dyn Host + Send>,
    pub settings: Settings,
}

impl std::fmt::Debug for Reconciler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reconciler")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

fn one(key: &str, value: Option<&str>) -> Changes {
    Changes::from([(key.to_string(), value.map(str::to_string))])
}

fn gpu_list(gpus: &[GpuRef]) -> String {
    gpus.iter()
        .map(|g| format!("GPU {} ({})", g.index, g.uuid))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Reconciler {
    /// Applies config `name`: `Ok` with `success` or `rebooting` (the reboot is under way), or
    /// `Err` with the reason after `failed` was reported and the clients restored.
    pub fn run(&mut self, name: &str) -> Result<State, String> {
        let meta = self.api.read().map_err(|e| {
            let reason = format!("cannot read the Node: {e}");
            tracing::error!(config = name, reason = %reason, "MIG config not applied");
            reason
        })?;
        let result = self.recover(&meta).and_then(|()| self.attempt(name, &meta));
        if let Err(reason) = &result {
            self.report_failed(name, reason);
        }
        result
    }

    /// Restores what an earlier run paused and could not restore (a crash, an API error), and
    /// deploy labels another manager left paused with no record (mig-parted #485).
    fn recover(&mut self, meta: &NodeMeta) -> Result<(), String> {
        let record = match meta.annotations.get(PAUSED_ANNOTATION) {
            Some(text) => Pause::from_record(text).unwrap_or_default(),
            None => Pause::default(),
        };
        let mut labels = orphaned_pauses(&meta.labels, &record);
        labels.extend(record.previous.clone());
        if labels.is_empty() && !meta.annotations.contains_key(PAUSED_ANNOTATION) {
            return Ok(());
        }
        tracing::warn!(labels = ?labels, "restoring GPU client labels left paused");
        self.patch_retrying(&labels, &one(PAUSED_ANNOTATION, None))
    }

    fn attempt(&mut self, name: &str, meta: &NodeMeta) -> Result<State, String> {
        let before = meta.labels.get(STATE_LABEL).and_then(|v| State::parse(v));
        let preview = self.layout.preview(name).map_err(|e| e.0)?;
        if preview.changes.is_empty() {
            if preview.pending_reset.is_empty() {
                return self.succeed(name);
            }
            return self.reset_or_reboot(name, meta, before, &preview.pending_reset);
        }
        tracing::info!(config = name, gpus = %gpu_list(&preview.changes), "applying MIG config");
        self.set_state(State::Pending)?;
        let pause = self.pause(meta, &preview.changes)?;
        let result = self.while_paused(name, &pause, &preview.changes);
        let restored = self.restore(&pause);
        let pending = match (result, restored) {
            (Ok(p), Ok(())) => p,
            (Err(e), Ok(())) | (Ok(_), Err(e)) => return Err(e),
            (Err(e), Err(r)) => return Err(format!("{e}; and {r}")),
        };
        if !pending.is_empty() {
            return self.reset_or_reboot(name, meta, before, &pending);
        }
        self.succeed(name)
    }

    fn while_paused(
        &mut self,
        name: &str,
        pause: &Pause,
        gpus: &[GpuRef],
    ) -> Result<Vec<GpuRef>, String> {
        self.wait_gone(pause, gpus)?;
        let pending = self.layout.apply(name).map_err(|e| e.0)?;
        self.host.refresh_cdi().map_err(|e| e.0)?;
        Ok(pending)
    }

    /// Pauses the clients holding `gpus`; the previous values go into the same PATCH.
    fn pause(&mut self, meta: &NodeMeta, gpus: &[GpuRef]) -> Result<Pause, String> {
        let holders = self.host.holders(CLIENTS, gpus);
        let holding: Vec<&str> = holders.iter().map(|p| p.label).collect();
        let pause = pause_for(&meta.labels, &holding);
        if pause.is_empty() {
            return Ok(pause);
        }
        tracing::info!(labels = ?pause.previous.keys().collect::<Vec<_>>(), "pausing GPU clients");
        self.api
            .patch(
                &pause.labels(),
                &one(PAUSED_ANNOTATION, Some(&pause.record())),
            )
            .map_err(|e| format!("cannot pause the GPU clients: {e}"))?;
        Ok(pause)
    }

    /// Waits until no process of a paused client holds one of `gpus`.
    fn wait_gone(&self, pause: &Pause, gpus: &[GpuRef]) -> Result<(), String> {
        let paused: Vec<_> = CLIENTS
            .iter()
            .copied()
            .filter(|c| pause.previous.contains_key(c.label))
            .collect();
        let start = Instant::now();
        loop {
            let left: Vec<Proc> = self.host.holders(&paused, gpus);
            if left.is_empty() {
                return Ok(());
            }
            if self.settings.stop.load(Ordering::Relaxed) {
                return Err("the manager is stopping (SIGTERM): change abandoned".to_string());
            }
            if start.elapsed() >= self.settings.client_timeout {
                let names: Vec<String> = left.iter().map(ToString::to_string).collect();
                return Err(format!(
                    "timed out after {}s waiting for the paused GPU clients to stop: {} still run",
                    self.settings.client_timeout.as_secs(),
                    names.join(", ")
                ));
            }
            sleep(self.settings.client_poll);
        }
    }

    fn restore(&mut self, pause: &Pause) -> Result<(), String> {
        if pause.is_empty() {
            return Ok(());
        }
        tracing::info!(labels = ?pause.previous, "restoring GPU clients");
        self.patch_retrying(&pause.previous, &one(PAUSED_ANNOTATION, None))
    }

    /// A PATCH tried three times; when all fail, the annotation still names what to restore and
    /// the next run (the agent retries with backoff) restores it first.
    fn patch_retrying(&mut self, labels: &Changes, annotations: &Changes) -> Result<(), String> {
        let mut last = String::new();
        for attempt in 0..3 {
            if attempt > 0 {
                sleep(self.settings.client_poll);
            }
            match self.api.patch(labels, annotations) {
                Ok(()) => return Ok(()),
                Err(e) => last = e.to_string(),
            }
        }
        Err(format!(
            "cannot restore the GPU client labels ({last}); the next attempt restores them first"
        ))
    }

    fn reset_or_reboot(
        &mut self,
        name: &str,
        meta: &NodeMeta,
        before: Option<State>,
        pending: &[GpuRef],
    ) -> Result<State, String> {
        let gpus = gpu_list(pending);
        if before == Some(State::Rebooting) {
            return Err(format!(
                "MIG mode change did not take effect after rebooting ({gpus})"
            ));
        }
        if !self.settings.with_reboot {
            return Err(format!("the MIG mode change of {gpus} waits for a GPU reset or a reboot: reboot the node, or run the manager with --with-reboot"));
        }
        if meta.annotations.get(REBOOT_ANNOTATION).map(String::as_str) == Some(name) {
            return Err(format!("the MIG mode change of {gpus} still waits after the reboot for config {name}: no second reboot (remove annotation {REBOOT_ANNOTATION} to allow one)"));
        }
        let labels = one(STATE_LABEL, Some(State::Rebooting.as_str()));
        self.api
            .patch(&labels, &one(REBOOT_ANNOTATION, Some(name)))
            .map_err(|e| format!("cannot set state rebooting: {e}"))?;
        self.event(
            false,
            "MIGConfigRebooting",
            &format!("rebooting for the MIG mode change of {gpus} (config {name})"),
        );
        self.host.reboot().map_err(|e| e.0)?;
        Ok(State::Rebooting)
    }

    fn set_state(&mut self, state: State) -> Result<(), String> {
        self.api
            .patch(&one(STATE_LABEL, Some(state.as_str())), &Changes::new())
            .map_err(|e| format!("cannot set state {}: {e}", state.as_str()))
    }

    fn succeed(&mut self, name: &str) -> Result<State, String> {
        let mut annotations = one(REBOOT_ANNOTATION, None);
        annotations.insert(REASON_ANNOTATION.to_string(), None);
        self.api
            .patch(
                &one(STATE_LABEL, Some(State::Success.as_str())),
                &annotations,
            )
            .map_err(|e| format!("cannot set state success: {e}"))?;
        tracing::info!(config = name, "MIG config applied");
        self.event(
            false,
            "MIGConfigApplied",
            &format!("MIG config {name} applied"),
        );
        Ok(State::Success)
    }

    fn report_failed(&mut self, name: &str, reason: &str) {
        let reason: String = reason.chars().take(MAX_REASON).collect();
        tracing::error!(config = name, reason = %reason, "MIG config failed");
        let annotations = one(REASON_ANNOTATION, Some(&reason));
        if let Err(e) = self.api.patch(
            &one(STATE_LABEL, Some(State::Failed.as_str())),
            &annotations,
        ) {
            tracing::error!(error = %e, "cannot set state failed");
        }
        self.event(
            true,
            "MIGConfigFailed",
            &format!("MIG config {name}: {reason}"),
        );
    }

    fn event(&self, warning: bool, reason: &str, message: &str) {
        if let Err(e) = self.api.event(warning, reason, message) {
            tracing::warn!(error = %e, reason, "cannot post the Event");
        }
    }
}

#[cfg(test)]
#[path = "reconcile_tests.rs"]
mod tests;
