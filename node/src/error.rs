//! Errors of node discovery.
//!
//! Every variant names what was being looked at (a file, a library, a root) and what the operator
//! can do about it, because these errors surface in `gpuhook cdi generate` and in hook logs where
//! nobody has a debugger.

use std::path::PathBuf;

/// Errors returned by discovery, NVML and the inventory cache.
///
/// A cause (an I/O error, a parse error) is part of its variant's message, in a field named
/// `error` and deliberately not a `#[source]`: callers print errors with `to_string()` (logs) or
/// as an `anyhow` chain (`{:#}`, the CLI), and either way the cause appears once.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// Neither the kernel module's `/proc` files nor a `libcuda` were found under the root.
    #[error(
        "no NVIDIA driver found under driver root {root}: looked for {looked_for}; if the driver is \
         installed elsewhere (e.g. a driver container at /run/nvidia/driver) pass `--driver-root`"
    )]
    NoDriver { root: PathBuf, looked_for: String },

    /// The driver version could not be determined from NVML, library names or `/proc`.
    #[error(
        "cannot tell the NVIDIA driver version under driver root {root}: NVML did not load, no \
         libcuda.so.<version>/libnvidia-ml.so.<version> was found and {proc_version} is missing; \
         check that the driver is fully installed there"
    )]
    DriverVersionUnknown {
        root: PathBuf,
        proc_version: PathBuf,
    },

    /// A file could not be read.
    #[error("cannot read {path}: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },

    /// A file is larger than any real one of its kind.
    #[error(
        "{path} is larger than {limit} bytes: not a file gpuhook reads (check the driver root)"
    )]
    TooLarge { path: PathBuf, limit: u64 },

    /// `ld.so.cache` is truncated, corrupt or of an unknown format.
    #[error(
        "ld.so.cache {path} is unusable: {error}; regenerate it with `ldconfig` (for a driver root \
         other than /: `ldconfig -r <driver-root>`)"
    )]
    LdCache { path: PathBuf, error: LdCacheError },

    /// A `/proc` file of the driver has content we cannot parse.
    #[error(
        "malformed {path}: {reason}; is the NVIDIA kernel module loaded and the driver root right?"
    )]
    Procfs { path: PathBuf, reason: String },

    /// `libnvidia-ml.so.1` was not found under the driver root.
    #[error(
        "libnvidia-ml.so.1 not found under driver root {root} (looked in its ld.so.cache and in {searched}); \
         install the driver's NVML library there or pass its path explicitly (`--nvml-lib`)"
    )]
    NvmlNotFound { root: PathBuf, searched: String },

    /// The NVML library could not be loaded or lacks a required function.
    #[error("cannot load NVML from {path}: {reason}")]
    NvmlLoad { path: PathBuf, reason: String },

    /// `nvmlInit_v2` failed.
    #[error(
        "NVML from {path} failed to initialise: {message} (NVML error {code}); check that the NVIDIA \
         kernel module is loaded and matches the library (`nvidia-smi`)"
    )]
    NvmlInit {
        path: PathBuf,
        code: u32,
        message: String,
    },

    /// Another NVML call failed.
    #[error(
        "NVML call {call} failed{}: {message} (NVML error {code}; library {path})",
        fmt_target(target)
    )]
    Nvml {
        path: PathBuf,
        call: &'static str,
        /// The device (index or UUID) the call was about, when any.
        target: Option<String>,
        code: u32,
        message: String,
    },

    /// The inventory cache file is unreadable, corrupt or of another format version.
    #[error("inventory cache {path} is unusable: {reason}; delete it or run `gpuhook cdi generate` to rebuild it")]
    InventoryCache { path: PathBuf, reason: String },

    /// Writing the inventory cache failed.
    #[error("cannot write inventory cache {path}: {error}; check that its directory exists and is writable")]
    InventoryWrite {
        path: PathBuf,
        error: std::io::Error,
    },
}

/// Why a cache could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LdCacheError {
    #[error("the file is empty")]
    Empty,
    #[error("unknown magic {found:?} (expected \"glibc-ld.so.cache1.1\" or \"ld.so-1.7.0\")")]
    UnknownMagic { found: String },
    #[error("unsupported new-format version {found:?} (expected \"1.1\")")]
    UnsupportedVersion { found: String },
    #[error("truncated: {what} needs bytes {offset}..{end} but the file has {len}")]
    Truncated {
        what: &'static str,
        offset: usize,
        end: usize,
        len: usize,
    },
    #[error("entry {index}: string offset {offset} points outside the file ({len} bytes)")]
    StringOutOfBounds {
        index: usize,
        offset: usize,
        len: usize,
    },
    #[error("entry {index}: string at offset {offset} is not NUL-terminated")]
    Unterminated { index: usize, offset: usize },
    #[error("the cache was written for {0} byte order, not this host's")]
    WrongEndian(&'static str),
}

fn fmt_target(target: &Option<String>) -> String {
    target
        .as_ref()
        .map(|t| format!(" for {t}"))
        .unwrap_or_default()
}

impl From<crate::bounded::BoundedReadError> for NodeError {
    fn from(e: crate::bounded::BoundedReadError) -> Self {
        use crate::bounded::BoundedReadError as B;
        match e {
            B::Io { path, error } => NodeError::Io { path, error },
            B::TooLarge { path, limit } => NodeError::TooLarge { path, limit },
        }
    }
}

impl NodeError {
    pub(crate) fn io(path: impl Into<PathBuf>, error: std::io::Error) -> Self {
        NodeError::Io {
            path: path.into(),
            error,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_read_errors_keep_their_kind() {
        let err: NodeError = crate::bounded::read_bounded(std::path::Path::new("/dev/zero"), 8)
            .unwrap_err()
            .into();
        assert!(matches!(err, NodeError::TooLarge { limit: 8, .. }), "{err}");
        let err: NodeError =
            crate::bounded::read_bounded(std::path::Path::new("/nonexistent/x"), 8)
                .unwrap_err()
                .into();
        assert!(matches!(err, NodeError::Io { .. }), "{err}");
    }
}
