//! The driver's side of the claim index ([`crate::podindex`]): after a claim is prepared, its
//! pods are read and their containers recorded; [`Driver::reindex`] follows the pods that join
//! (and leave) the claim's `status.reservedFor` later (`claimwatch.rs` calls it); unprepare
//! removes the claim's entries. None of it fails a claim: containerd 1.7+ and CRI-O take the
//! CDI IDs from the kubelet and never need the index, so a pod that cannot be read is a warning.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use super::{ClaimRef, Driver};
use crate::checkpoint::{ClaimState, PreparedDevice};
use crate::claim::{parse_claim, ResourceClaim};
use crate::error::DraError;
use crate::podindex::{self, Reindexed, MAX_RESERVED};

impl Driver {
    /// `<plugin dir>/pods`, beside the checkpoint.
    pub fn index_dir(&self) -> PathBuf {
        self.opts.checkpoint.with_file_name(podindex::DIR_NAME)
    }

    /// The claims prepared on this node (checkpoint state `PrepareCompleted`).
    pub fn prepared_claims(&self) -> Vec<ClaimRef> {
        let cp = self.checkpoint.lock().unwrap_or_else(|p| p.into_inner());
        let done = cp
            .claims()
            .filter(|(_, e)| e.state == ClaimState::PrepareCompleted);
        done.map(|(uid, e)| ClaimRef {
            namespace: e.namespace.clone(),
            name: e.name.clone(),
            uid: uid.clone(),
        })
        .collect()
    }

    /// Reads pod `pod` (UID `pod_uid`) of claim `rc` and records its containers that use it.
    async fn index_pod(
        &self,
        rc: &ResourceClaim,
        pod: &str,
        pod_uid: &str,
        devices: &[PreparedDevice],
    ) -> Result<(), DraError> {
        let ns = rc.metadata.namespace.clone();
        let (cluster, n, p) = (self.cluster.clone(), ns.clone(), pod.to_string());
        let got = tokio::task::spawn_blocking(move || cluster.get_pod(&n, &p))
            .await
            .map_err(|e| DraError::Invalid {
                what: "Pod",
                value: format!("{ns}/{pod}"),
                why: format!("reading it panicked: {e}"),
            })??;
        let c = podindex::containers_of_claim(got, &ns, pod_uid, &rc.metadata.name, devices)?;
        podindex::record(&self.index_dir(), pod_uid, &rc.metadata.uid, c)
    }

    /// Records the containers of each pod `rc` is reserved for that use it.
    pub(super) async fn index_pods(&self, rc: &ResourceClaim, devices: &[PreparedDevice]) {
        for (pod, pod_uid) in rc.pods().into_iter().take(MAX_RESERVED) {
            if let Err(e) = self.index_pod(rc, &pod, &pod_uid, devices).await {
                tracing::warn!(
                    claim = %rc.key(), pod = %pod, pod_uid = %pod_uid, error = %e,
                    "claim index not updated: on containerd 1.6 this pod's containers will not get the claim's devices (containerd 1.7+/CRI-O are unaffected)"
                );
            }
        }
    }

    /// Brings prepared claim `claim`'s index up to date with its `status.reservedFor`, under
    /// the claim's lock (never beside a prepare or unprepare of it): each reserved pod not in
    /// `known` is read and indexed; each pod of `known` no longer reserved loses its entry for
    /// the claim. `known` (the pods already handled; `None`: read from the index files) is
    /// updated. Nothing is removed unless the API server returned the claim with this UID: a
    /// claim that is gone or re-created keeps its entries until the kubelet unprepares it.
    pub async fn reindex(
        &self,
        claim: &ClaimRef,
        known: &mut Option<BTreeSet<String>>,
    ) -> Result<Reindexed, DraError> {
        let lock = self.lock_of(&claim.uid);
        let _held = lock.lock().await;
        let mut out = Reindexed::default();
        let Some(entry) = self.entry(&claim.uid) else {
            return Ok(out);
        };
        if entry.state != ClaimState::PrepareCompleted {
            return Ok(out);
        }
        let dir = self.index_dir();
        let known = match known {
            Some(k) => k,
            None => known.insert(podindex::pods_of_claim(&dir, &claim.uid)?),
        };
        let (cluster, ns, name) = (
            self.cluster.clone(),
            claim.namespace.clone(),
            claim.name.clone(),
        );
        let value = tokio::task::spawn_blocking(move || cluster.get_claim(&ns, &name))
            .await
            .map_err(|e| DraError::Invalid {
                what: "ResourceClaim",
                value: format!("{}/{}", claim.namespace, claim.name),
                why: format!("reading it panicked: {e}"),
            })??;
        let rc = parse_claim(value, &claim.namespace, &claim.name, &claim.uid)?;
        let reserved: BTreeMap<String, String> = rc
            .pods()
            .into_iter()
            .take(MAX_RESERVED)
            .map(|(name, uid)| (uid, name))
            .collect();
        let new: Vec<(&String, &String)> = reserved
            .iter()
            .filter(|(u, _)| !known.contains(*u))
            .collect();
        for (pod_uid, pod) in new {
            match self.index_pod(&rc, pod, pod_uid, &entry.devices).await {
                Ok(()) => {
                    known.insert(pod_uid.clone());
                    out.added.push(pod_uid.clone());
                }
                Err(e) => out.failed.push((pod.clone(), e.to_string())),
            }
        }
        let gone: Vec<String> = known
            .iter()
            .filter(|u| !reserved.contains_key(*u))
            .cloned()
            .collect();
        for pod_uid in gone {
            podindex::record(&dir, &pod_uid, &claim.uid, podindex::ContainerIds::new())?;
            known.remove(&pod_uid);
            out.removed.push(pod_uid);
        }
        Ok(out)
    }

    /// Removes claim `uid` from the index.
    pub(super) fn unindex(&self, uid: &str) {
        if let Err(e) = podindex::remove_claim(&self.index_dir(), uid) {
            tracing::warn!(claim = %uid, error = %e, "claim index entries not removed");
        }
    }
}
