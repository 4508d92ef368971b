//! The Kubernetes device plugin: serves each extended resource of a [`gpuhook_sharing::Advertisement`]
//! to the kubelet over the device plugin API v1beta1 (gRPC on a unix socket), and answers
//! Allocate with what gpuhook-runtime, the prestart hook and CDI-aware runtimes turn into a
//! container.

pub mod allocate;
pub mod api;
pub mod changes;
pub mod error;
#[cfg(feature = "testing")]
pub mod fake_kubelet;
#[cfg(feature = "testing")]
pub mod fake_pod_resources;
pub mod fingerprint;
pub mod health;
pub mod kubelet;
pub mod metrics;
pub mod monitor;
pub mod mps_share;
pub mod node_label;
pub mod podresources;
pub mod preferred;
pub mod run;
pub mod served;
pub mod server;
pub mod service;
pub mod source;
pub mod status;
pub mod usage;
