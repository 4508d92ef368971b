//! At start with partitionable MIG: claims this plugin made MIG devices for whose ResourceClaim
//! is gone (deleted, or re-created with another UID) while the plugin was down, or that crashed
//! between a create and the checkpoint and were never prepared again, are unprepared, so their
//! MIG devices are destroyed. Only the devices such a claim's checkpoint records name are
//! touched (`dynmig::owned`): a MIG device this plugin did not make is never destroyed. A claim
//! whose ResourceClaim cannot be read (API server down) is kept. NVIDIA's driver destroys, at
//! start, every MIG device no completed claim references, also ones made by others
//! (dra-facts §5); this is deliberately narrower. Then every GPU whose MIG mode the plugin
//! switched on and that holds no MIG device any more is switched off (`modes.rs`; NVIDIA's
//! `obliterateStaleMIGDevices` ends with `maybeDisableMigMode` on every GPU).

use std::sync::Arc;

use crate::driver::Driver;

/// Whether the claim `uid` recorded as `ns/name` no longer exists in the API server.
async fn gone(driver: &Driver, uid: &str, ns: &str, name: &str) -> bool {
    let (cluster, ns2, name2) = (driver.cluster(), ns.to_string(), name.to_string());
    match tokio::task::spawn_blocking(move || cluster.get_claim(&ns2, &name2)).await {
        Ok(Ok(v)) => v["metadata"]["uid"].as_str() != Some(uid),
        Ok(Err(e)) if e.is_not_found() => true,
        Ok(Err(e)) => {
            tracing::warn!(claim = %uid, error = %e, "cannot tell whether the claim still exists; its MIG devices are kept");
            false
        }
        Err(_) => false,
    }
}

/// Unprepares the checkpointed claims with MIG devices whose ResourceClaim is gone; the number
/// unprepared.
pub async fn sweep(driver: Arc<Driver>) -> usize {
    let mut n = 0;
    for (uid, e) in driver.claims_with_mig() {
        if !gone(&driver, &uid, &e.namespace, &e.name).await {
            continue;
        }
        match driver.unprepare(&uid).await {
            Ok(()) => {
                n += 1;
                tracing::info!(claim = %uid, namespace = %e.namespace, name = %e.name, devices = e.mig.len(), "claim gone: its MIG devices destroyed");
            }
            Err(err) => {
                tracing::warn!(claim = %uid, error = %err, "claim gone but its MIG devices could not be destroyed")
            }
        }
    }
    if let Some(p) = driver.partitioner() {
        let _ = tokio::task::spawn_blocking(move || p.settle()).await;
    }
    n
}
