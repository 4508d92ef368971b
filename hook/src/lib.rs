//! gpuhook: give containers NVIDIA GPUs.
//!
//! The binaries are thin; the logic lives in libraries so it can be unit-tested without root:
//! `gpuhook-node` (discovery), `gpuhook-cdi` (CDI specs and edits), `gpuhook-inject` (safe
//! operations inside a container root), and this crate's [`request`] (what a container asks for,
//! parsed from untrusted strings).

pub mod request;
