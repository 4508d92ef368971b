//! One error type for the whole crate. Every variant names the path or device it is about, because
//! these errors end up in a hook's log where nobody can re-run the hook to find out which of forty
//! mounts failed.

use std::path::PathBuf;

/// Errors from injecting into a container root.
///
/// An I/O cause is part of its variant's message (field `error`, deliberately not a `#[source]`):
/// callers print errors with `to_string()` (hook logs) or as an `anyhow` chain (`{:#}`, the CLI),
/// and either way the cause appears once.
#[derive(Debug, thiserror::Error)]
pub enum InjectError {
    /// The container root itself could not be opened.
    #[error("cannot open container root {path}: {error}")]
    OpenRoot {
        path: PathBuf,
        error: std::io::Error,
    },
    /// A path inside the container root could not be resolved or created (pathrs / openat2).
    #[error("{op} {path} inside container root {root}: {error}")]
    InRoot {
        op: &'static str,
        root: PathBuf,
        path: PathBuf,
        error: std::io::Error,
    },
    /// A host-side or generic I/O operation failed.
    #[error("{op} {path}: {error}")]
    Io {
        op: &'static str,
        path: PathBuf,
        error: std::io::Error,
    },
    /// Something already exists at the destination with the wrong type.
    #[error(
        "{path} in the container is {found}, expected {expected}; remove it from the image or \
         choose another destination"
    )]
    WrongType {
        path: PathBuf,
        found: &'static str,
        expected: &'static str,
    },
    /// The request was refused for safety reasons (hostile path, would overwrite a file, ...).
    #[error("refusing {path}: {reason}")]
    Refused { path: PathBuf, reason: String },
    /// A host device node does not carry the device number we were told to expose.
    #[error(
        "host device node {path} is {found}, expected character device {major}:{minor}; \
         the node is stale or was replaced, re-create it (nvidia-modprobe) before retrying"
    )]
    DeviceMismatch {
        path: PathBuf,
        found: String,
        major: u32,
        minor: u32,
    },
    /// A mount step failed.
    #[error("bind mount {src} -> {dst} failed at {step}: {error}")]
    Mount {
        src: PathBuf,
        dst: PathBuf,
        step: &'static str,
        error: std::io::Error,
    },
    /// Entering another process' mount namespace failed.
    #[error("cannot enter the mount namespace of pid {pid} ({step}): {error}")]
    MountNamespace {
        pid: i32,
        step: &'static str,
        error: std::io::Error,
    },
    /// The sandboxed ldconfig could not run or failed.
    #[error("ldconfig {binary} for rootfs {rootfs}: {reason}")]
    Ldconfig {
        binary: PathBuf,
        rootfs: PathBuf,
        reason: String,
    },
    /// The device cgroup could not be found or updated.
    #[error("device cgroup of pid {pid}: {reason}")]
    Cgroup { pid: i32, reason: String },
    /// A bpf(2) command failed.
    #[error("bpf {op} on {path}: {error}{log}")]
    Bpf {
        op: &'static str,
        path: PathBuf,
        log: String,
        error: std::io::Error,
    },
    /// Invalid OCI state or bundle configuration.
    #[error("invalid OCI {what}: {reason}")]
    Oci { what: String, reason: String },
    /// Invalid argument given by the caller (a device rule, a folder, ...).
    #[error("invalid {what} {value:?}: {reason}")]
    Invalid {
        what: &'static str,
        value: String,
        reason: String,
    },
}

/// Crate result alias.
pub type Result<T, E = InjectError> = std::result::Result<T, E>;

/// Convert a pathrs error into an `std::io::Error`, keeping the errno when there is one so callers
/// can tell ENOENT from a safety violation (pathrs reports those as attacks, we map them to EXDEV).
pub(crate) fn pathrs_io(err: pathrs::error::Error) -> std::io::Error {
    match err.kind() {
        pathrs::error::ErrorKind::OsError(Some(errno)) => std::io::Error::from_raw_os_error(errno),
        pathrs::error::ErrorKind::SafetyViolation => std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!("pathrs safety violation (possible attack): {err}"),
        ),
        _ => std::io::Error::other(err.to_string()),
    }
}
