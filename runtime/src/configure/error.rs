//! Errors of `configure`: each names the file and says how to fix it; none leaves a file written.

use std::path::PathBuf;

use thiserror::Error;

use super::DROP_IN_MARKER;

/// Why nothing was written.
///
/// An I/O cause is part of its variant's message (field `error`, deliberately not a `#[source]`):
/// callers print it with `to_string()` (the doctor) or as an `anyhow` chain (`{:#}`, the CLI), and
/// either way it appears once.
#[derive(Debug, Error)]
pub enum ConfigureError {
    #[error("invalid {option}: {message}")]
    InvalidOption {
        option: &'static str,
        message: String,
    },
    #[error(
        "refusing --set-as-default: runtime {runtime} sets privileged_without_host_devices = true, and \
         as the default runtime it would give every privileged pod (CSI drivers, GPU driver \
         containers) no host devices, breaking them; select it per pod with a RuntimeClass \
         (drop --set-as-default), or add --privileged-host-devices to make privileged containers \
         of this runtime see all host devices as with runc; nothing was written"
    )]
    DefaultHidesHostDevices { runtime: String },
    #[error("cannot read {}: {error}", path.display())]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("cannot parse {} as TOML: {message}fix the file (or restore a backup) and re-run; nothing was written", path.display())]
    Parse { path: PathBuf, message: String },
    #[error("{}: unknown containerd config version {found} (supported: 1, 2, 3); nothing was written", path.display())]
    UnknownVersion { path: PathBuf, found: String },
    #[error("{}: `{key}` must be {expected}; fix it and re-run; nothing was written", path.display())]
    WrongType {
        path: PathBuf,
        key: String,
        expected: &'static str,
    },
    #[error("{}: a drop-in needs config version 2 or 3 (this file is version 1); add `version = 2` and migrate it, or run without --drop-in", path.display())]
    DropInNeedsV2 { path: PathBuf },
    #[error("refusing to replace {}: it was not written by gpuhook (no `{DROP_IN_MARKER}` first line); remove it or choose another drop-in path", path.display())]
    NotOurs { path: PathBuf },
    #[error("cannot back up {} to {}: {error}", path.display(), backup.display())]
    Backup {
        path: PathBuf,
        backup: PathBuf,
        error: std::io::Error,
    },
    #[error("cannot parse {} as JSON: {message}; fix the file (or restore a backup) and re-run; nothing was written", path.display())]
    ParseJson { path: PathBuf, message: String },
    #[error("{} is larger than {limit} bytes; refusing to edit it; nothing was written", path.display())]
    TooLarge { path: PathBuf, limit: u64 },
    #[error(
        "refusing to write into {}: it is a symlink to {} (give the real directory, or replace \
         the link by a directory); nothing was written",
        dir.display(),
        target.display()
    )]
    DirIsSymlink { dir: PathBuf, target: PathBuf },
    #[error(
        "{} changed while gpuhook was editing it (someone else wrote it); nothing was written: \
         re-run to apply the change to its new content",
        path.display()
    )]
    ChangedSince { path: PathBuf },
    #[error("{engine} does not support {what}: {message}; nothing was written")]
    Unsupported {
        engine: &'static str,
        what: &'static str,
        message: String,
    },
    #[error("cannot write {}: {error}", path.display())]
    Write {
        path: PathBuf,
        error: std::io::Error,
    },
}

#[cfg(test)]
#[path = "error_tests.rs"]
mod tests;
