//! The crate's error type: every variant names what failed and, where there is one, the fix.

use std::path::PathBuf;

use thiserror::Error;

use crate::spec::Format;
use crate::validate::ValidationError;

/// Errors of CDI generation, parsing, writing and applying.
///
/// An I/O cause is part of its variant's message (field `error`, deliberately not a `#[source]`):
/// callers print errors with `to_string()` (logs) or as an `anyhow` chain (`{:#}`, the CLI), and
/// either way the cause appears once.
#[derive(Debug, Error)]
pub enum CdiError {
    /// A generation option is unusable.
    #[error("invalid option {option}: {message}")]
    InvalidOption {
        option: &'static str,
        message: String,
    },
    /// A [`gpuhook_node::DeviceRef`] names no device of the inventory.
    #[error(
        "device {device} is not in the inventory (re-run discovery, or pick an existing device)"
    )]
    UnknownDevice { device: String },
    /// A device node's major number is unknown to the inventory.
    #[error("cannot describe {path} for {device}: the {major} major is unknown (is the kernel module loaded? see /proc/devices)")]
    MissingMajor {
        device: String,
        path: String,
        major: &'static str,
    },
    /// The node has no device a spec could describe (no GPU, or only MIG-enabled GPUs without
    /// MIG devices): a CDI spec needs at least one device.
    #[error("the node has no GPU or MIG device to describe: {reason}")]
    NothingToDescribe { reason: String },
    #[error("cannot parse CDI spec as {}: {message}", format.as_str())]
    Parse { format: Format, message: String },
    #[error("cannot serialise CDI spec: {0}")]
    Serialize(String),
    /// The spec breaks the CDI schema or rules.
    #[error("invalid CDI spec: {}", crate::validate::join_errors(errors))]
    Invalid { errors: Vec<ValidationError> },
    /// Refusing to replace a file gpuhook did not write.
    #[error("refusing to overwrite {}: {reason}; remove it or choose another --output", path.display())]
    NotOurs { path: PathBuf, reason: String },
    #[error("output directory {} is not writable: {error} (choose another --output or fix its permissions)", dir.display())]
    OutputDirNotWritable { dir: PathBuf, error: std::io::Error },
    #[error("cannot {op} {}: {error}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        error: std::io::Error,
    },
    /// Requested CDI devices that no loaded spec defines (names come from a container: the
    /// message shows a bounded number of them, each cut to a bounded length).
    #[error("unresolvable CDI devices {}", capped_list(names))]
    Unresolvable { names: Vec<String> },
    /// A deviceNode without type/major whose host path is not a device.
    #[error("CDI device node {path} (host {}) : {message}", host_path.display())]
    BadDeviceNode {
        path: String,
        host_path: PathBuf,
        message: String,
    },
    /// A spec file larger than any real spec.
    #[error("{} is larger than {limit} bytes: not a CDI spec gpuhook reads (remove or shrink it)", path.display())]
    TooLarge { path: PathBuf, limit: u64 },
    /// The OCI runtime spec does not have the expected shape.
    #[error("invalid OCI spec: {0}")]
    OciSpec(String),
}

impl From<gpuhook_node::bounded::BoundedReadError> for CdiError {
    fn from(e: gpuhook_node::bounded::BoundedReadError) -> Self {
        use gpuhook_node::bounded::BoundedReadError as B;
        match e {
            B::Io { path, error } => CdiError::io("read", path, error),
            B::TooLarge { path, limit } => CdiError::TooLarge { path, limit },
        }
    }
}

impl CdiError {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, error: std::io::Error) -> Self {
        CdiError::Io {
            op,
            path: path.into(),
            error,
        }
    }
}

/// Most characters of one untrusted value echoed in an error message.
pub const MAX_ECHOED_CHARS: usize = 128;
/// Most values of an untrusted list echoed in an error message.
pub const MAX_ECHOED_VALUES: usize = 16;

/// `value`, cut to [`MAX_ECHOED_CHARS`] characters (with `…` when cut).
pub fn capped(value: &str) -> String {
    match value.char_indices().nth(MAX_ECHOED_CHARS) {
        Some((at, _)) => format!("{}…", &value[..at]),
        None => value.to_string(),
    }
}

/// The first [`MAX_ECHOED_VALUES`] values, each [`capped`], joined by `, `, with the count of
/// the others.
pub fn capped_list(values: &[String]) -> String {
    let mut out: Vec<String> = values
        .iter()
        .take(MAX_ECHOED_VALUES)
        .map(|v| capped(v))
        .collect();
    if values.len() > MAX_ECHOED_VALUES {
        out.push(format!("and {} more", values.len() - MAX_ECHOED_VALUES));
    }
    out.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echoed_values_are_capped() {
        let long = "x".repeat(1000);
        let names: Vec<String> = (0..40).map(|_| long.clone()).collect();
        let msg = CdiError::Unresolvable { names }.to_string();
        assert!(msg.len() < 3000, "{} bytes", msg.len());
        assert!(msg.ends_with("and 24 more"), "{msg}");
        assert_eq!(capped("nvidia.com/gpu=0"), "nvidia.com/gpu=0");
    }
}
