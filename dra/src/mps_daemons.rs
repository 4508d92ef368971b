//! Every MPS control daemon of prepared claims: one per plain MPS claim (`mps.rs`), one per GPU
//! for its consumable-capacity shares (`mps_share.rs`), each supervised (`mps_supervise.rs`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::checkpoint::{Checkpoint, ClaimState};
use crate::mps::{claim_layout, stop_stale, ClaimMps, MpsDaemon, MpsEdits, MpsOptions};
use crate::mps_supervise::{self, Proc, Supervised};

/// The MPS dir recorded in the checkpoint for claim `uid`: its own, or its GPU's shared one.
pub fn dir_of(root: &Path, uid: &str, want: &ClaimMps) -> PathBuf {
    match (want.shared, want.uuids.first()) {
        (true, Some(gpu)) => crate::mps_share::layout(root, gpu).dir,
        _ => claim_layout(root, uid).dir,
    }
}

/// Every MPS daemon this run supervises: one per plain MPS claim, one per GPU for shares.
#[derive(Debug, Default)]
pub struct Daemons {
    claims: tokio::sync::Mutex<HashMap<String, Supervised>>,
    shared: crate::mps_share::SharedDaemons,
}

impl Daemons {
    /// The daemons of the claims `cp` records as prepared (an earlier run's): each one still
    /// running (same pid and start time) is adopted and watched, each dead one restarted with
    /// its claim's limits (`mps_supervise.rs`). Spawns tasks when there are any: call it in the
    /// runtime.
    pub fn adopt(opts: &MpsOptions, cp: &Checkpoint) -> Self {
        let mut claims = HashMap::new();
        let mut shared = Vec::new();
        let prepared = cp
            .claims()
            .filter(|(_, e)| e.state == ClaimState::PrepareCompleted);
        for (uid, e) in prepared {
            let Some(dir) = &e.mps_dir else { continue };
            if crate::mps_share::is_shared_dir(&opts.root, dir) {
                shared.push(dir.clone());
                continue;
            }
            let l = claim_layout(&opts.root, uid);
            let Some(want) = mps_supervise::recorded_want(&l) else {
                tracing::warn!(claim = %uid, dir = %l.dir.display(), "MPS limits of a prepared claim not found: its daemon is not supervised");
                continue;
            };
            let proc = mps_supervise::found(&l);
            claims.insert(uid.clone(), Supervised::spawn(opts, l, want, proc));
        }
        Daemons {
            claims: tokio::sync::Mutex::new(claims),
            shared: crate::mps_share::SharedDaemons::adopt(opts, shared),
        }
    }

    /// Starts claim `uid`'s daemon (or joins its GPU's shared one); its limits are in force
    /// when this returns, and it is supervised from then on.
    pub async fn start(
        &self,
        opts: &MpsOptions,
        uid: &str,
        want: &ClaimMps,
    ) -> Result<MpsEdits, String> {
        if want.shared {
            return self.shared.join(opts, uid, want).await;
        }
        let d = MpsDaemon::start(opts, uid, want).await?;
        let edits = MpsEdits {
            pipe: d.layout.pipe.clone(),
            shm: opts.shm.then(|| d.layout.shm.clone()),
            env: Vec::new(),
        };
        mps_supervise::record_want(&d.layout, want);
        let (layout, proc) = d.into_parts();
        let s = Supervised::spawn(opts, layout, want.clone(), Proc::Child(Box::new(proc)));
        self.claims.lock().await.insert(uid.to_string(), s);
        Ok(edits)
    }

    /// Stops what claim `uid` runs (`dir`: its checkpointed MPS dir), also when an earlier run
    /// of the plugin started it; a shared daemon only with the GPU's last share. Supervision
    /// ends first, then the daemon; the compute mode is restored and the dir removed.
    pub async fn stop(&self, opts: &MpsOptions, uid: &str, dir: Option<&Path>) {
        if let Some(s) = self.claims.lock().await.remove(uid) {
            let dir = s.layout.dir.clone();
            s.stop().await;
            if let Err(e) = std::fs::remove_dir_all(&dir) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!(dir = %dir.display(), error = %e, "MPS dir left behind");
                }
            }
            return;
        }
        match dir {
            Some(dir) if crate::mps_share::is_shared_dir(&opts.root, dir) => {
                self.shared.leave(opts, uid, dir).await
            }
            Some(_) => stop_stale(opts, uid).await,
            None => {}
        }
    }

    /// Shutdown: supervision ends, the daemons keep running for their containers (they lead
    /// their own process groups); the checkpoint and each daemon's identity record let the
    /// next run adopt them.
    pub async fn shutdown(&self) {
        for (uid, s) in self.claims.lock().await.drain() {
            tracing::info!(claim = %uid, "leaving the claim's MPS daemon to the next run");
            s.detach().await;
        }
        self.shared.shutdown().await;
    }
}
