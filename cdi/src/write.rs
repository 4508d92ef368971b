//! Writing a spec file safely.
//!
//! Runtimes watch the spec directories and may read a file while it is being written, so a spec is
//! written to a temporary file in the same directory, fsynced and renamed over the target. An
//! unchanged spec is not rewritten (no spurious inotify events, mtime kept).
//!
//! We only ever replace a file that is *ours*: it parses as a CDI spec of the same `kind`, and
//! every hook it carries runs a gpuhook binary (the hook path's file name is `gpuhook`, or its
//! `args[0]` is `gpuhook`); a spec of our kind without hooks counts as ours too. Anything else
//! (another vendor's spec, NVIDIA's toolkit spec with `nvidia-cdi-hook`, a corrupt file, a
//! directory or symlink) is refused with an error telling the user to remove it or choose another
//! output, and is left untouched.

use std::fs;
use std::path::Path;

use gpuhook_fs::{AtomicWriter, NotOurs, Outcome, Step, WriteError};
use gpuhook_node::bounded::MAX_CDI_SPEC_BYTES;

use crate::edits::GPUHOOK_PROGRAM;
use crate::spec::{Format, Spec};
use crate::{validate, CdiError};

/// Mode of written spec files.
pub const SPEC_FILE_MODE: u32 = 0o644;

/// What [`write_spec`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOutcome {
    /// The file was created or replaced.
    Written,
    /// The file already had exactly this content; it was not touched.
    Unchanged,
}

/// The conventional file name of a spec: `nvidia.com/gpu` -> `nvidia.com-gpu.json`.
pub fn default_file_name(kind: &str, format: Format) -> String {
    format!("{}.{}", kind.replace('/', "-"), format.as_str())
}

/// Why a spec file is not gpuhook's to overwrite (see [`is_ours`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Foreign {
    #[error("it holds kind {found:?}, not {expected:?}")]
    OtherKind { found: String, expected: String },
    #[error("it has a hook running {program} (not written by gpuhook)")]
    OtherHook { program: String },
}

/// Why `existing` is not ours to overwrite with a spec of `kind`, or `Ok` when it is.
pub fn is_ours(existing: &Spec, kind: &str) -> Result<(), Foreign> {
    if existing.kind != kind {
        return Err(Foreign::OtherKind {
            found: existing.kind.clone(),
            expected: kind.into(),
        });
    }
    let edits = std::iter::once(&existing.container_edits)
        .chain(existing.devices.iter().map(|d| &d.container_edits));
    for hook in edits.flat_map(|e| &e.hooks) {
        let by_path = Path::new(&hook.path).file_name() == Some(GPUHOOK_PROGRAM.as_ref());
        let by_arg = hook.args.first().map(String::as_str) == Some(GPUHOOK_PROGRAM);
        if !(by_path || by_arg) {
            return Err(Foreign::OtherHook {
                program: hook.path.clone(),
            });
        }
    }
    Ok(())
}

/// Validates `spec` ([`validate::validate_model`]) and writes it to `path` atomically with mode
/// 0644, creating the directory.
/// On any error the previous file (if any) is untouched and no temporary file is left.
pub fn write_spec(spec: &Spec, path: &Path, format: Format) -> Result<WriteOutcome, CdiError> {
    write_checked(spec, path, format, true)
}

/// Like [`write_spec`], but replaces a valid spec file that gpuhook did not write (an explicit
/// take-over, `gpuhook cdi generate --force`). Still refuses a non-regular file.
pub fn write_spec_replacing(
    spec: &Spec,
    path: &Path,
    format: Format,
) -> Result<WriteOutcome, CdiError> {
    write_checked(spec, path, format, false)
}

fn write_checked(
    spec: &Spec,
    path: &Path,
    format: Format,
    check_owner: bool,
) -> Result<WriteOutcome, CdiError> {
    validate::validate_model(spec).map_err(|errors| CdiError::Invalid { errors })?;
    let bytes = spec.to_bytes(format)?;
    if path.file_name().is_none() {
        return Err(CdiError::InvalidOption {
            option: "output",
            message: format!("{} does not name a file", path.display()),
        });
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    fs::create_dir_all(dir).map_err(|error| CdiError::OutputDirNotWritable {
        dir: dir.to_path_buf(),
        error,
    })?;
    // Even a take-over replaces only a CDI spec, never some other file.
    let check = |old: &[u8]| {
        let fmt = Format::from_path(path).unwrap_or_else(|| Format::sniff(old));
        let existing = Spec::from_slice(old, Some(fmt))
            .map_err(|e| NotOurs::new(format!("it is not a valid CDI spec ({e})")))?;
        if check_owner {
            is_ours(&existing, &spec.kind).map_err(|e| NotOurs::new(e.to_string()))?;
        }
        Ok(())
    };
    let outcome = AtomicWriter::new(SPEC_FILE_MODE)
        .skip_unchanged()
        .owner_check(&check, MAX_CDI_SPEC_BYTES)
        .write(path, &bytes)
        .map_err(from_write_error)?;
    Ok(match outcome {
        Outcome::Written => WriteOutcome::Written,
        Outcome::Unchanged => WriteOutcome::Unchanged,
    })
}

/// The writer's error as the [`CdiError`] `gpuhook cdi generate` has always reported.
fn from_write_error(e: WriteError) -> CdiError {
    match e {
        WriteError::NotRegular { path, .. } => CdiError::NotOurs {
            path,
            reason: "it is not a regular file".into(),
        },
        WriteError::NotOurs { path, reason } => CdiError::NotOurs {
            path,
            reason: reason.reason,
        },
        WriteError::TooLarge { path, limit } => CdiError::TooLarge { path, limit },
        WriteError::Io {
            step: Step::CreateTemp,
            path,
            error,
        } => CdiError::OutputDirNotWritable { dir: path, error },
        WriteError::Io { step, path, error } => CdiError::io(step.as_str(), path, error),
        WriteError::NoFileName { path } => CdiError::InvalidOption {
            option: "output",
            message: format!("{} does not name a file", path.display()),
        },
    }
}

#[cfg(test)]
#[path = "write_tests.rs"]
mod tests;
