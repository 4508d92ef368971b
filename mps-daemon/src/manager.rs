//! The set of GPU supervisors: start from a plan, apply a reloaded plan, stop all.
//!
//! A reload restarts only GPUs whose [`GpuPlan`] changed (limits, resource, binary, shm size),
//! starts new ones and stops removed ones; the supervision timing is pushed to the running tasks
//! without restarting anything. A plan that moves the MPS root is refused: the lock and every
//! path would move under running daemons.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::inventory::ComputeModeSetter;
use crate::plan::{GpuPlan, Plan, Timing};
use crate::restart::{Handover, Stop};
use crate::settings::EnforceSettings;
use crate::status::Board;
use crate::supervisor::GpuSupervisor;

#[derive(Debug)]
struct Running {
    plan: GpuPlan,
    stop: watch::Sender<Stop>,
    task: JoinHandle<()>,
}

/// What a reload did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReloadSummary {
    pub started: Vec<String>,
    pub restarted: Vec<String>,
    pub stopped: Vec<String>,
    pub unchanged: Vec<String>,
}

/// Why a new plan was refused (nothing changed).
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error("mpsDaemon.mpsRoot cannot change on reload ({} -> {}); restart gpu-mps-daemon", old.display(), new.display())]
    RootChanged {
        old: std::path::PathBuf,
        new: std::path::PathBuf,
    },
}

/// Owns one supervisor task per MPS-shared GPU.
#[derive(Debug)]
pub struct Manager {
    plan: Plan,
    board: Board,
    timing: watch::Sender<Timing>,
    enforce: watch::Sender<EnforceSettings>,
    compute: Arc<dyn ComputeModeSetter>,
    running: BTreeMap<String, Running>,
    /// Admin compute modes handed from a replaced supervisor to its successor.
    handover: Handover,
}

impl Manager {
    /// Starts a supervisor per GPU of `plan`.
    pub fn start(plan: Plan, board: Board, compute: Arc<dyn ComputeModeSetter>) -> Self {
        let (timing, _) = watch::channel(plan.timing);
        let (enforce, _) = watch::channel(plan.enforce.clone());
        let mut m = Manager {
            plan: plan.clone(),
            board,
            timing,
            enforce,
            compute,
            running: BTreeMap::new(),
            handover: Handover::default(),
        };
        for g in &plan.gpus {
            m.spawn(g.clone());
        }
        m
    }

    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    fn spawn(&mut self, g: GpuPlan) {
        let (stop, stop_rx) = watch::channel(Stop::Run);
        let sup = GpuSupervisor::new(
            g.clone(),
            &self.plan.mps_root,
            self.board.clone(),
            self.timing.subscribe(),
            self.compute.clone(),
            self.enforce.subscribe(),
            self.handover.clone(),
        );
        let task = tokio::spawn(sup.run(stop_rx));
        self.running.insert(
            g.uuid.clone(),
            Running {
                plan: g,
                stop,
                task,
            },
        );
    }

    async fn stop(&mut self, uuids: &[String], why: Stop) {
        let mut tasks = Vec::new();
        for u in uuids {
            if let Some(r) = self.running.remove(u) {
                let _ = r.stop.send(why);
                tasks.push(r.task);
            }
        }
        for t in tasks {
            if let Err(e) = t.await {
                tracing::error!(error = %e, "GPU supervisor task failed");
            }
        }
    }

    /// Applies a new plan. Errors (nothing changed) when the MPS root differs.
    pub async fn reload(&mut self, new: Plan) -> Result<ReloadSummary, ReloadError> {
        if new.mps_root != self.plan.mps_root {
            return Err(ReloadError::RootChanged {
                old: self.plan.mps_root.clone(),
                new: new.mps_root,
            });
        }
        self.timing.send_replace(new.timing);
        self.enforce.send_replace(new.enforce.clone());
        let wanted: BTreeMap<&str, &GpuPlan> =
            new.gpus.iter().map(|g| (g.uuid.as_str(), g)).collect();
        let mut sum = ReloadSummary::default();
        let (mut to_stop, mut to_replace) = (Vec::new(), Vec::new());
        for (uuid, r) in &self.running {
            match wanted.get(uuid.as_str()) {
                None => {
                    sum.stopped.push(uuid.clone());
                    to_stop.push(uuid.clone());
                }
                Some(g) if **g != r.plan => {
                    sum.restarted.push(uuid.clone());
                    to_replace.push(uuid.clone());
                }
                Some(_) => sum.unchanged.push(uuid.clone()),
            }
        }
        self.stop(&to_stop, Stop::Remove).await;
        self.stop(&to_replace, Stop::Replace).await;
        for g in &new.gpus {
            if !self.running.contains_key(&g.uuid) {
                if !sum.restarted.contains(&g.uuid) {
                    sum.started.push(g.uuid.clone());
                }
                self.spawn(g.clone());
            }
        }
        self.plan = new;
        Ok(sum)
    }

    /// Stops every supervisor (each quits its daemon and cleans up) and waits for them.
    pub async fn shutdown(mut self) {
        let all: Vec<String> = self.running.keys().cloned().collect();
        self.stop(&all, Stop::Remove).await;
    }
}
