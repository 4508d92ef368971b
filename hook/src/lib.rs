//! gpuhook: give containers NVIDIA GPUs.
//!
//! The binaries are thin; the logic lives in libraries so it can be unit-tested without root:
//! `gpuhook-node` (discovery), `gpuhook-cdi` (CDI specs and edits), `gpuhook-inject` (safe
//! operations inside a container root), `gpuhook-request` (what a container asks for, parsed
//! from untrusted strings; re-exported as [`request`]), and this crate's [`config`] (the node's
//! `config.toml`), [`logging`] (where the hook may write: a file or stderr, never stdout),
//! [`prestart`] (the OCI hook) and [`cli`]. The runc wrapper `gpuhook-runtime` is the
//! `gpuhook-wrapper` crate, over this one.

pub mod cli;
pub mod config;
pub mod doctor;
pub mod logging;
pub mod prestart;

/// What a container asks for: the `gpuhook-request` crate, re-exported so `gpuhook::request` paths
/// keep working.
pub use gpuhook_request as request;
