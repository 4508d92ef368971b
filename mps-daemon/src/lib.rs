//! gpu-mps-daemon: one supervised `nvidia-cuda-mps-control` per shared GPU.
//!
//! NVIDIA's k8s-device-plugin starts MPS without `CUDA_VISIBLE_DEVICES`, with no timeout on its
//! health check, without supervising the daemon, and lets pods start before the limits are set.
//! This daemon fixes each of those: one control daemon per GPU restricted to that GPU, every
//! command bounded by a timeout, crash/wedge detection with restart, and a ready signal (file and
//! `/readyz`) that appears only after the limits were applied and read back.
//!
//! Modules: [`config`] (file format), [`plan`] (checks against the node, limits), [`control`]
//! (the control binary), [`supervisor`] (per-GPU lifecycle), [`manager`] (set of GPUs, reload),
//! [`status`] / [`http`] / [`metrics`] (reporting), [`lock`] (one instance per root), [`cli`]
//! (arguments), [`run`] (wiring), [`cdi`] (the `nvidia.com/gpu-mps` CDI spec that connects containers),
//! [`watcher`] / [`enforce`] / [`cgroup`] (clients per container, caps, gone containers),
//! [`users`] (the user of each server, clients waiting for another user's server).
//! [`fence`] / [`restart`] (compute mode PROHIBITED until the limits are read back, backoff,
//! the hand-over between supervisors of one GPU).

pub mod attrib;
pub mod cdi;
pub mod cdi_writer;
pub mod cgroup;
pub mod cli;
pub mod config;
pub mod control;
pub mod cri;
pub mod daemon_proc;
pub mod enforce;
pub mod fence;
pub mod histogram;
pub mod http;
pub mod inventory;
pub mod kdp;
pub mod layout;
pub mod limits;
pub mod lock;
pub mod manager;
pub mod metrics;
pub mod metrics_parse;
pub mod metrics_registry;
pub mod node;
pub mod plan;
pub mod plan_select;
pub mod plan_settings;
pub mod probe;
pub mod process;
pub mod restart;
pub mod run;
pub mod safefs;
pub mod settings;
pub mod shm;
pub mod status;
pub mod status_file;
pub mod status_table;
pub mod supervisor;
pub mod users;
pub mod watcher;

/// The CDI library, re-exported for the end-to-end tests that apply our spec like a runtime.
pub use gpuhook_cdi;
