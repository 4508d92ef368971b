//! How a GPU supervisor restarts and stops: the backoff between restarts, why it is stopped, and
//! the admin's compute mode handed from a supervisor to the one that replaces it.
//!
//! A reload that changes a GPU's settings stops its supervisor and starts a new one. That
//! hand-over must not open the window [`crate::fence`] closes: the old supervisor sets PROHIBITED
//! before it quits its daemon and does not restore the admin's mode; it hands that mode to the new
//! supervisor (which would otherwise read PROHIBITED as the admin's), and the new one sets
//! EXCLUSIVE_PROCESS once its limits are read back, as on any start.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::fence::ComputeFence;
use crate::inventory::ComputeMode;

/// First restart delay; doubled per consecutive failure up to `maxRestartBackoff`.
const BACKOFF_BASE: Duration = Duration::from_millis(100);

/// Delay before restart number `failures` (1-based).
pub fn backoff(failures: u32, max: Duration) -> Duration {
    let shift = failures.saturating_sub(1).min(20);
    BACKOFF_BASE.saturating_mul(1 << shift).min(max)
}

/// What a supervisor's stop channel says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Stop {
    /// Keep running.
    #[default]
    Run,
    /// Stop for good (shutdown, GPU removed from the config): the admin's mode is restored.
    Remove,
    /// A supervisor of the same GPU follows (reload): the GPU stays PROHIBITED in between.
    Replace,
}

/// Admin compute modes handed from a stopping supervisor to the next one of the same GPU.
#[derive(Debug, Clone, Default)]
pub struct Handover(Arc<Mutex<BTreeMap<String, ComputeMode>>>);

impl Handover {
    fn map(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, ComputeMode>> {
        // Plain inserts and removals: a panic elsewhere cannot leave the map inconsistent.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The admin's mode a previous supervisor of `uuid` handed over, if any.
    pub fn take(&self, uuid: &str) -> Option<ComputeMode> {
        self.map().remove(uuid)
    }

    /// Before the daemon is quit: a replaced GPU is fenced through the hand-over.
    pub async fn before_quit(&self, fence: &mut ComputeFence, stop: Stop, to: Duration) {
        if stop == Stop::Replace {
            fence.prohibit(to).await;
        }
    }

    /// After the daemon is gone: the admin's mode is restored, or handed over on a replace.
    pub async fn finish(&self, fence: &mut ComputeFence, uuid: &str, stop: Stop, to: Duration) {
        match (stop, fence.admin()) {
            (Stop::Replace, Some(admin)) => {
                self.map().insert(uuid.to_string(), admin);
            }
            (Stop::Replace, None) => {}
            _ => fence.restore(to).await,
        }
    }
}

#[cfg(test)]
#[path = "restart_tests.rs"]
mod tests;
