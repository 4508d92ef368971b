//! Every MPS control daemon of prepared claims: one per plain MPS claim (`mps.rs`), one per GPU
//! for its consumable-capacity shares (`mps_share.rs`).

use std::path::{Path, PathBuf};

use crate::mps::{claim_layout, stop_stale, ClaimMps, MpsDaemon, MpsEdits, MpsOptions};

/// The MPS dir recorded in the checkpoint for claim `uid`: its own, or its GPU's shared one.
pub fn dir_of(root: &Path, uid: &str, want: &ClaimMps) -> PathBuf {
    match (want.shared, want.uuids.first()) {
        (true, Some(gpu)) => crate::mps_share::layout(root, gpu).dir,
        _ => claim_layout(root, uid).dir,
    }
}

/// Every MPS daemon this run started: one per plain MPS claim, one per GPU for shares.
#[derive(Debug, Default)]
pub struct Daemons {
    claims: tokio::sync::Mutex<std::collections::HashMap<String, MpsDaemon>>,
    shared: crate::mps_share::SharedDaemons,
}

impl Daemons {
    /// Starts claim `uid`'s daemon (or joins its GPU's shared one); its limits are in force
    /// when this returns.
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
        self.claims.lock().await.insert(uid.to_string(), d);
        Ok(edits)
    }

    /// Stops what claim `uid` runs (`dir`: its checkpointed MPS dir), also when an earlier run
    /// of the plugin started it; a shared daemon only with the GPU's last share.
    pub async fn stop(&self, opts: &MpsOptions, uid: &str, dir: Option<&Path>) {
        if let Some(d) = self.claims.lock().await.remove(uid) {
            d.stop(opts).await;
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

    /// Shutdown: the daemons keep running for their containers (they lead their own process
    /// groups); the checkpoint and each daemon's identity record let the next run stop them.
    pub async fn shutdown(&self) {
        for (uid, d) in self.claims.lock().await.drain() {
            tracing::info!(claim = %uid, "leaving the claim's MPS daemon to the next run");
            std::mem::forget(d);
        }
        self.shared.shutdown().await;
    }
}
