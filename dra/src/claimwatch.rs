//! Keeps the claim index ([`crate::podindex`]) current for pods that join or leave a claim
//! already prepared on this node (containerd 1.6 only needs it; dra/README.md, "The claim
//! index").
//!
//! The kubelet calls `NodePrepareResources` once per claim and node: a second pod of a shared
//! claim is served from its claim-info cache (kubernetes `pkg/kubelet/cm/dra/manager.go`,
//! `prepareResources`: `claimInfo.addPodReference(pod.UID)`, then "If this claim is already
//! prepared, continue" — no call to the plugin). So every `every`, for each prepared claim (the
//! checkpoint), the plugin GETs the claim (the `get` on resourceclaims it already has; one
//! request per prepared claim, no list, no new RBAC) and [`Driver::reindex`] compares its
//! `status.reservedFor` (at most 256 pods) with the pods it knows: a new pod is read and
//! indexed, a pod that left loses its entry. A failure (API server down, a pod not readable
//! yet) is logged with the claim and pod and tried again at the next tick; the log is at warn
//! level on the 1st, 2nd, 4th, 8th … consecutive failure of a claim, at debug otherwise.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use crate::driver::Driver;

/// What the watch remembers of one prepared claim.
#[derive(Debug, Default)]
struct Followed {
    /// Pods handled (`None`: read from the index files at the first tick).
    known: Option<BTreeSet<String>>,
    /// Consecutive failed ticks.
    failures: u32,
}

/// The watch's state: prepared claim UID → what is known of it.
#[derive(Debug, Default)]
pub struct ClaimWatch {
    claims: BTreeMap<String, Followed>,
}

fn loud(failures: u32) -> bool {
    failures.is_power_of_two()
}

impl ClaimWatch {
    /// One pass over the prepared claims.
    pub async fn tick(&mut self, driver: &Driver) {
        let prepared = driver.prepared_claims();
        self.claims
            .retain(|uid, _| prepared.iter().any(|c| &c.uid == uid));
        for claim in prepared {
            let f = self.claims.entry(claim.uid.clone()).or_default();
            let key = format!("{}/{}", claim.namespace, claim.name);
            let res = driver.reindex(&claim, &mut f.known).await;
            let failed = match res {
                Ok(r) => {
                    for p in &r.added {
                        tracing::info!(claim = %key, claim_uid = %claim.uid, pod_uid = %p, "claim index: reserved pod read and indexed");
                    }
                    for p in &r.removed {
                        tracing::info!(claim = %key, claim_uid = %claim.uid, pod_uid = %p, "claim index: pod left the claim, its entry removed");
                    }
                    r.failed
                }
                Err(e) => vec![(String::new(), e.to_string())],
            };
            if failed.is_empty() {
                if f.failures > 0 {
                    tracing::info!(claim = %key, failures = f.failures, "claim index: claim followed again");
                }
                f.failures = 0;
                continue;
            }
            f.failures = f.failures.saturating_add(1);
            for (pod, error) in failed {
                if loud(f.failures) {
                    tracing::warn!(claim = %key, claim_uid = %claim.uid, pod = %pod, failures = f.failures, error = %error, "claim index: cannot follow the claim's pods; trying again (on containerd 1.6 a pod that joined gets the claim's devices only once indexed)");
                } else {
                    tracing::debug!(claim = %key, pod = %pod, failures = f.failures, error = %error, "claim index: still failing");
                }
            }
        }
    }
}

/// Runs [`ClaimWatch::tick`] every `every` until aborted.
pub fn spawn(driver: Arc<Driver>, every: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut watch = ClaimWatch::default();
        loop {
            tokio::time::sleep(every).await;
            watch.tick(&driver).await;
        }
    })
}

#[cfg(test)]
#[path = "claimwatch_tests.rs"]
mod tests;
