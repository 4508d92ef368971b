//! gpuhook-exporter: GPU telemetry for Prometheus straight from NVML, a drop-in for NVIDIA's
//! dcgm-exporter (same metric names, HELP/TYPE, labels, counters CSV, port), plus per-pod usage
//! of shared GPUs (time-slicing, MPS, MIG) that dcgm-exporter cannot give.
//!
//! Module map: [`cli`] flags; [`counters`] the counters CSV; [`fields`] DCGM field names → NVML;
//! [`devices`] GPU/MIG identities; [`sample`] one GPU's sample; [`collect`] the per-GPU
//! collector threads (timeouts, stale, lost); [`xid`] the Xid event thread; [`pods`] process →
//! pod attribution; [`page`], [`render`], [`render_pods`] the page; [`http`] the endpoint; [`run`] wiring.

pub mod cli;
pub mod collect;
pub mod counters;
pub mod devices;
pub mod fields;
pub mod http;
pub mod page;
pub mod pods;
pub mod render;
pub mod render_pods;
pub mod run;
pub mod sample;
pub mod xid;
