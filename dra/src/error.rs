//! Errors of the DRA plugin. A per-claim error is returned to the kubelet in that claim's
//! `error` field (its `Display` is the message), never as a gRPC error for the whole call.

use std::path::PathBuf;

/// Why a claim could not be prepared or unprepared, or the plugin could not start.
#[derive(Debug, thiserror::Error)]
pub enum DraError {
    #[error("the API server: {0}")]
    Kube(#[from] crate::kube::KubeError),
    #[error("ResourceClaim {namespace}/{name}: the API server has UID {found}, the kubelet asked for {wanted} (the claim was deleted and re-created)")]
    UidMismatch {
        namespace: String,
        name: String,
        found: String,
        wanted: String,
    },
    #[error("ResourceClaim {namespace}/{name} is not allocated (no status.allocation)")]
    NotAllocated { namespace: String, name: String },
    #[error("ResourceClaim {claim}: device {device:?} of pool {pool:?} is not on this node (it has: {known})")]
    UnknownDevice {
        claim: String,
        pool: String,
        device: String,
        known: String,
    },
    #[error("ResourceClaim {claim}: device {device} is already prepared for claim {other}")]
    DeviceBusy {
        claim: String,
        device: String,
        other: String,
    },
    #[error("ResourceClaim {claim}: {source}")]
    Config {
        claim: String,
        #[source]
        source: crate::config::ConfigError,
    },
    #[error("ResourceClaim {claim}: the GPU refused time-slice interval {interval} on {uuid}: {message}")]
    TimeSlice {
        claim: String,
        uuid: String,
        interval: String,
        message: String,
    },
    #[error("ResourceClaim {claim}: MIG device: {message}")]
    Mig { claim: String, message: String },
    #[error("ResourceClaim {claim}: MPS control daemon: {message}")]
    Mps { claim: String, message: String },
    #[error("CDI spec for claim {claim}: {source}")]
    Cdi {
        claim: String,
        #[source]
        source: gpuhook_cdi::CdiError,
    },
    #[error("checkpoint {}: {message}", path.display())]
    Checkpoint { path: PathBuf, message: String },
    #[error("claim index {}: {message}", path.display())]
    Index { path: PathBuf, message: String },
    #[error("cannot remove {}: {source}", path.display())]
    Remove {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("socket {}: {source}", path.display())]
    Socket {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid {what} {value:?}: {why}")]
    Invalid {
        what: &'static str,
        value: String,
        why: String,
    },
    #[error("ResourceSlice {name}: {message}")]
    Slice { name: String, message: String },
}
