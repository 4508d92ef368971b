//! The driver's side of the claim index ([`crate::podindex`]): after a claim is prepared, its
//! pods are read and their containers recorded; unprepare removes the claim's entries. Neither
//! fails the claim: containerd 1.7+ and CRI-O take the CDI IDs from the kubelet and never need
//! the index, so a pod that cannot be read is a warning.

use std::path::PathBuf;

use super::Driver;
use crate::checkpoint::PreparedDevice;
use crate::claim::ResourceClaim;
use crate::podindex;

impl Driver {
    /// `<plugin dir>/pods`, beside the checkpoint.
    pub fn index_dir(&self) -> PathBuf {
        self.opts.checkpoint.with_file_name(podindex::DIR_NAME)
    }

    /// Records the containers of each pod `rc` is reserved for that use it.
    pub(super) async fn index_pods(&self, rc: &ResourceClaim, devices: &[PreparedDevice]) {
        let ns = rc.metadata.namespace.clone();
        for (pod, pod_uid) in rc.pods() {
            let cluster = self.cluster.clone();
            let (n, p) = (ns.clone(), pod.clone());
            let got = tokio::task::spawn_blocking(move || cluster.get_pod(&n, &p)).await;
            let res = match got {
                Ok(Ok(v)) => {
                    podindex::containers_of_claim(v, &ns, &pod_uid, &rc.metadata.name, devices)
                        .and_then(|c| {
                            podindex::record(&self.index_dir(), &pod_uid, &rc.metadata.uid, c)
                        })
                }
                Ok(Err(e)) => Err(e.into()),
                Err(e) => {
                    tracing::warn!(pod = %pod, error = %e, "reading the pod panicked");
                    continue;
                }
            };
            if let Err(e) = res {
                tracing::warn!(
                    claim = %rc.key(), pod = %pod, error = %e,
                    "claim index not updated: on containerd 1.6 this pod's containers will not get the claim's devices (containerd 1.7+/CRI-O are unaffected)"
                );
            }
        }
    }

    /// Removes claim `uid` from the index.
    pub(super) fn unindex(&self, uid: &str) {
        if let Err(e) = podindex::remove_claim(&self.index_dir(), uid) {
            tracing::warn!(claim = %uid, error = %e, "claim index entries not removed");
        }
    }
}
