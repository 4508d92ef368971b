//! The loop: read the Node every `poll`, run when `nvidia.com/mig.config` changed (and once at
//! start, as NVIDIA's informer's first Add event does), retry a failed run with exponential
//! backoff. Runs are sequential, and the label is read again after each, so a relabel during an
//! apply is queued: the running apply finishes (its clients restored), then the newest value is
//! applied. An empty or absent label never triggers a run; removing the label and putting the
//! same value back does (NVIDIA's rules).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::labels::{State, CONFIG_LABEL};
use crate::reconcile::Reconciler;

/// Timing of the loop.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// Between two reads of the Node.
    pub poll: Duration,
    /// The first retry after a failure; doubled after each failed retry…
    pub min_backoff: Duration,
    /// …up to this.
    pub max_backoff: Duration,
}

/// What one [`Agent::step`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Nothing to do (or the Node could not be read).
    Idle,
    /// A run for this config value, and its result.
    Ran {
        config: String,
        result: Result<State, String>,
    },
}

/// The agent's memory between runs.
#[derive(Debug)]
pub struct Agent {
    pub reconciler: Reconciler,
    pub timing: Timing,
    /// The value of the last run (`None`: none yet, or the label was removed since).
    last: Option<String>,
    /// When to retry the last value, after a failure.
    retry_at: Option<Instant>,
    backoff: Duration,
}

impl Agent {
    pub fn new(reconciler: Reconciler, timing: Timing) -> Agent {
        Agent {
            reconciler,
            timing,
            last: None,
            retry_at: None,
            backoff: timing.min_backoff,
        }
    }

    /// When the next retry is due, if one is scheduled.
    pub fn retry_at(&self) -> Option<Instant> {
        self.retry_at
    }

    /// Reads the Node once and runs if the label changed or a retry is due.
    pub fn step(&mut self) -> Step {
        let meta = match self.reconciler.api.read() {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the Node; trying again");
                return Step::Idle;
            }
        };
        let Some(value) = meta.labels.get(CONFIG_LABEL).filter(|v| !v.is_empty()) else {
            self.last = None;
            self.retry_at = None;
            return Step::Idle;
        };
        let changed = self.last.as_deref() != Some(value.as_str());
        let due = self.retry_at.is_some_and(|at| Instant::now() >= at);
        if !changed && !due {
            return Step::Idle;
        }
        if changed {
            self.backoff = self.timing.min_backoff;
        }
        let config = value.clone();
        let result = self.reconciler.run(&config);
        self.last = Some(config.clone());
        match &result {
            Ok(_) => {
                self.retry_at = None;
                self.backoff = self.timing.min_backoff;
            }
            Err(_) => {
                tracing::info!(config = %config, retry_in_s = self.backoff.as_secs(), "will retry");
                self.retry_at = Some(Instant::now() + self.backoff);
                self.backoff = (self.backoff * 2).min(self.timing.max_backoff);
            }
        }
        Step::Ran { config, result }
    }

    /// Steps until the reconciler's stop flag is set (SIGTERM), sleeping `poll` in short slices
    /// so that a stop is seen at once.
    pub fn run(&mut self) {
        let stop = self.reconciler.settings.stop.clone();
        while !stop.load(Ordering::Relaxed) {
            self.step();
            let until = Instant::now() + self.timing.poll;
            while Instant::now() < until && !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(100).min(self.timing.poll));
            }
        }
        tracing::info!("stopping");
    }
}

#[cfg(test)]
#[path = "agent_tests.rs"]
mod tests;
