//! Keeps the CDI spec file in step with the plan and with which GPUs have become ready.
//!
//! Runs as one task: on every board change or new plan it works out the set of GPUs that were
//! ready (see [`crate::cdi`]) and rewrites the file only when that set or the plan changed.
//! When told to stop it removes the file first, before the control daemons are shut down, so
//! no container is created against a daemon that is going away.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;

use gpuhook_node::Inventory;
use tokio::sync::watch;

use crate::cdi::{build_spec, publish, remove_spec, spec_path, CDI_KIND};
use crate::plan::{GpuPlan, Plan};
use crate::status::{Board, CdiStatus, GpuState};

/// What the spec is made from; replaced as a whole on reload.
#[derive(Debug)]
pub struct CdiInputs {
    pub plan: Plan,
    pub inventory: Inventory,
}

fn path_of(inputs: &CdiInputs) -> PathBuf {
    spec_path(&inputs.plan.cdi.spec_dir)
}

/// Runs until `stop` changes, then removes the spec.
pub async fn run(
    board: Board,
    mut inputs: watch::Receiver<Arc<CdiInputs>>,
    mut stop: watch::Receiver<bool>,
) {
    let mut changes = board.subscribe();
    // GPUs that have been ready, with the plan they were ready under.
    let mut ready: BTreeMap<String, GpuPlan> = BTreeMap::new();
    let mut written: Option<(usize, BTreeSet<String>)> = None;
    let mut current = inputs.borrow_and_update().clone();
    let mut generation = 0usize;
    let mut old_path: Option<PathBuf> = None;
    loop {
        let snap = board.snapshot();
        ready.retain(|u, p| current.plan.gpus.iter().any(|g| &g.uuid == u && g == p));
        for s in snap.gpus.iter().filter(|s| s.state == GpuState::Ready) {
            if let Some(g) = current.plan.gpus.iter().find(|g| g.uuid == s.uuid) {
                ready.entry(s.uuid.clone()).or_insert_with(|| g.clone());
            }
        }
        let uuids: BTreeSet<String> = ready.keys().cloned().collect();
        if written.as_ref() != Some(&(generation, uuids.clone())) {
            let path = path_of(&current);
            if let Some(old) = old_path.take().filter(|o| *o != path) {
                if let Err(e) = remove_spec(&old) {
                    tracing::warn!(error = %e, "cannot remove the previous CDI spec");
                }
            }
            old_path = Some(path.clone());
            let res = build_spec(&current.plan, &current.inventory, Some(&uuids))
                .and_then(|spec| publish(&path, spec.as_ref()).map(|changed| (spec, changed)));
            match res {
                Ok((spec, changed)) => {
                    let devices: Vec<String> = spec
                        .iter()
                        .flat_map(|s| s.qualified_devices().map(|(n, _)| n))
                        .collect();
                    if changed {
                        tracing::info!(path = %path.display(), kind = CDI_KIND, gpus = uuids.len(),
                            devices = devices.len(), "CDI spec updated");
                    }
                    board.set_cdi(CdiStatus {
                        spec_path: Some(path.display().to_string()),
                        devices,
                        last_error: None,
                    });
                    written = Some((generation, uuids));
                }
                Err(e) => {
                    tracing::error!(path = %path.display(), error = %e, "cannot write the CDI spec");
                    board.set_cdi(CdiStatus {
                        spec_path: Some(path.display().to_string()),
                        devices: Vec::new(),
                        last_error: Some(e.to_string()),
                    });
                    // Retried when readiness or the plan changes (not on every board change:
                    // recording the error is itself one).
                    written = Some((generation, uuids));
                }
            }
        }
        tokio::select! {
            r = changes.changed() => if r.is_err() { break },
            r = inputs.changed() => {
                if r.is_err() { break }
                current = inputs.borrow_and_update().clone();
                generation += 1;
            }
            _ = stop.changed() => break,
        }
    }
    let path = path_of(&current);
    match remove_spec(&path) {
        Ok(true) => tracing::info!(path = %path.display(), "CDI spec removed"),
        Ok(false) => {}
        Err(e) => tracing::warn!(path = %path.display(), error = %e, "cannot remove the CDI spec"),
    }
}
