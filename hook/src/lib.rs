//! gpuhook: give containers NVIDIA GPUs.
//!
//! The binaries are thin; the logic lives in libraries so it can be unit-tested without root:
//! `gpuhook-node` (discovery), `gpuhook-cdi` (CDI specs and edits), `gpuhook-inject` (safe
//! operations inside a container root), and this crate's [`request`] (what a container asks for,
//! parsed from untrusted strings), [`config`] (the node's `config.toml`) and [`logging`] (where
//! the hook may write: a file or stderr, never stdout).

pub mod cli;
pub mod config;
pub mod doctor;
pub mod logging;
pub mod prestart;
pub mod request;
pub mod wrapper;
