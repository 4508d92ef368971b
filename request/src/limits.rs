//! Hardening limits for container-controlled input.
//!
//! The hook runs as root on every container start and parses strings chosen by whoever built the
//! image. These bounds keep a hostile config from costing unbounded time or memory; anything over
//! them is refused with an error that names the limit (and nothing is injected).

/// Most `process.env` entries we accept.
pub const MAX_ENV_ENTRIES: usize = 10_000;
/// Largest single env entry, annotation value or mount path, in bytes.
pub const MAX_VALUE_BYTES: usize = 1 << 20;
/// Largest device-id list (one `NVIDIA_VISIBLE_DEVICES` value, or all ids of a source), in bytes.
pub const MAX_ID_LIST_BYTES: usize = 64 << 10;
/// Most entries in a device-id list.
pub const MAX_ID_ENTRIES: usize = 4096;
/// Most annotations we look at.
pub const MAX_ANNOTATIONS: usize = 10_000;
/// Most mounts we look at (only when volume-mount device lists are enabled).
pub const MAX_MOUNTS: usize = 10_000;
/// Most device names a log line or an error message lists (the rest are counted): a container
/// chooses them.
pub const MAX_NAMES_SHOWN: usize = 16;

/// Human-readable byte count for messages (`64 KiB`, `1 MiB`).
pub(crate) fn bytes(n: usize) -> String {
    if n & ((1 << 20) - 1) == 0 {
        format!("{} MiB", n >> 20)
    } else if n & ((1 << 10) - 1) == 0 {
        format!("{} KiB", n >> 10)
    } else {
        format!("{n} bytes")
    }
}
