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
use std::io::{ErrorKind, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

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

/// Why `existing` is not ours to overwrite with a spec of `kind`, or `Ok` when it is.
pub fn is_ours(existing: &Spec, kind: &str) -> Result<(), String> {
    if existing.kind != kind {
        return Err(format!("it holds kind {:?}, not {kind:?}", existing.kind));
    }
    let edits = std::iter::once(&existing.container_edits)
        .chain(existing.devices.iter().map(|d| &d.container_edits));
    for hook in edits.flat_map(|e| &e.hooks) {
        let by_path = Path::new(&hook.path).file_name() == Some(GPUHOOK_PROGRAM.as_ref());
        let by_arg = hook.args.first().map(String::as_str) == Some(GPUHOOK_PROGRAM);
        if !(by_path || by_arg) {
            return Err(format!(
                "it has a hook running {} (not written by gpuhook)",
                hook.path
            ));
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
    let Some(file_name) = path.file_name() else {
        return Err(CdiError::InvalidOption {
            option: "output",
            message: format!("{} does not name a file", path.display()),
        });
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    fs::create_dir_all(&dir).map_err(|source| CdiError::OutputDirNotWritable {
        dir: dir.clone(),
        source,
    })?;
    match fs::symlink_metadata(path) {
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(CdiError::io("inspect", path, e)),
        Ok(meta) if !meta.file_type().is_file() => {
            return Err(CdiError::NotOurs {
                path: path.into(),
                reason: "it is not a regular file".into(),
            })
        }
        Ok(meta) => {
            let old = crate::read_spec_file(path)?;
            if old == bytes {
                if meta.permissions().mode() & 0o7777 != SPEC_FILE_MODE {
                    fs::set_permissions(path, fs::Permissions::from_mode(SPEC_FILE_MODE))
                        .map_err(|e| CdiError::io("chmod", path, e))?;
                }
                return Ok(WriteOutcome::Unchanged);
            }
            let fmt = Format::from_path(path).unwrap_or_else(|| Format::sniff(&old));
            let existing = Spec::from_slice(&old, Some(fmt)).map_err(|e| CdiError::NotOurs {
                path: path.into(),
                reason: format!("it is not a valid CDI spec ({e})"),
            })?;
            if check_owner {
                is_ours(&existing, &spec.kind).map_err(|reason| CdiError::NotOurs {
                    path: path.into(),
                    reason,
                })?;
            }
        }
    }
    write_atomic(&dir, file_name.as_ref(), &bytes)?;
    Ok(WriteOutcome::Written)
}

/// Temp file in `dir` + fsync + rename to `dir/name` + fsync of `dir`.
pub(crate) fn write_atomic(dir: &Path, name: &Path, bytes: &[u8]) -> Result<(), CdiError> {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let tmp = dir.join(format!(
        ".{}.tmp-{}-{}",
        name.display(),
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(SPEC_FILE_MODE)
        .open(&tmp)
        .map_err(|source| CdiError::OutputDirNotWritable {
            dir: dir.into(),
            source,
        })?;
    let target = dir.join(name);
    let result = (|| {
        // The umask may have removed bits from the create mode.
        file.set_permissions(fs::Permissions::from_mode(SPEC_FILE_MODE))
            .map_err(|e| CdiError::io("chmod", &tmp, e))?;
        file.write_all(bytes)
            .map_err(|e| CdiError::io("write", &tmp, e))?;
        file.sync_all()
            .map_err(|e| CdiError::io("fsync", &tmp, e))?;
        fs::rename(&tmp, &target).map_err(|e| CdiError::io("rename into place", &target, e))
    })();
    if let Err(e) = result {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    // Make the rename durable; the file itself is complete either way.
    if let Err(e) = fs::File::open(dir).and_then(|d| d.sync_all()) {
        tracing::warn!(dir = %dir.display(), error = %e, "cannot fsync spec directory");
    }
    Ok(())
}

#[cfg(test)]
#[path = "write_tests.rs"]
mod tests;
