//! The one atomic file writer of the workspace.
//!
//! Everything gpuhook publishes (CDI specs, the inventory cache, a bundle's `config.json`,
//! containerd's config, the MPS status and ready files, the installer's binaries and state) is
//! read by someone else while we may be writing it: runc, containerd's CDI watcher, kubelet, an
//! admin. So a file is written to a temporary file in the same directory, fsynced, renamed over
//! the target and the directory fsynced: a reader sees the old file or the new one, never half of
//! one, and a failure leaves the old file in place and no temporary file behind.
//!
//! The writer never replaces what is not ours to replace: a symlink, a directory or any other
//! non-regular file at the path is refused, and a caller may add an ownership check on the
//! existing content (the CDI crate refuses another vendor's spec). Options cover the callers'
//! differences: keep the replaced file's mode and owner (a config file an admin owns), leave an
//! unchanged file alone (no spurious inotify event, mtime kept), and skip the fsyncs where only
//! atomicity matters ([`AtomicWriter::durable`]).

mod error;
mod existing;
#[cfg(feature = "testing")]
pub mod testing;

use std::fs::{self, File, OpenOptions, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

pub use error::{NotOurs, Step, WriteError};
use existing::Existing;

/// What [`AtomicWriter::write`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The file was created or replaced.
    Written,
    /// The file already held exactly these bytes and was left alone
    /// ([`AtomicWriter::skip_unchanged`]).
    Unchanged,
}

/// A caller's check that an existing file is its own to replace.
pub type OwnerCheck<'a> = &'a dyn Fn(&[u8]) -> Result<(), NotOurs>;

/// How to write; [`AtomicWriter::new`] gives a durable write with a fixed mode.
#[derive(Clone, Copy)]
pub struct AtomicWriter<'a> {
    mode: u32,
    keep_mode: bool,
    keep_owner: bool,
    durable: bool,
    skip_unchanged: bool,
    owner_check: Option<(OwnerCheck<'a>, u64)>,
}

impl std::fmt::Debug for AtomicWriter<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AtomicWriter")
            .field("mode", &format_args!("{:o}", self.mode))
            .field("keep_mode", &self.keep_mode)
            .field("keep_owner", &self.keep_owner)
            .field("durable", &self.durable)
            .field("skip_unchanged", &self.skip_unchanged)
            .field("owner_check", &self.owner_check.map(|(_, limit)| limit))
            .finish()
    }
}

impl<'a> AtomicWriter<'a> {
    /// A durable write giving the file `mode` (exactly: the umask does not apply).
    pub fn new(mode: u32) -> Self {
        AtomicWriter {
            mode,
            keep_mode: false,
            keep_owner: false,
            durable: true,
            skip_unchanged: false,
            owner_check: None,
        }
    }

    /// A replaced file keeps its mode; `mode` is then only for a new file.
    pub fn keep_mode(mut self) -> Self {
        self.keep_mode = true;
        self
    }

    /// A replaced file keeps its owner and group, where we may set them (as root); failing to is
    /// not worth losing the write.
    pub fn keep_owner(mut self) -> Self {
        self.keep_owner = true;
        self
    }

    /// With `false`, no fsync of the file or the directory: the write stays atomic for readers
    /// but may be lost on a crash. For files that do not outlive a crash anyway (a bundle's
    /// `config.json`), where two fsyncs would cost milliseconds on every container start.
    pub fn durable(mut self, durable: bool) -> Self {
        self.durable = durable;
        self
    }

    /// A file that already holds the bytes is left alone (its mode set right if it is not).
    pub fn skip_unchanged(mut self) -> Self {
        self.skip_unchanged = true;
        self
    }

    /// An existing file is replaced only when `check` accepts its content (read up to `limit`
    /// bytes; a larger file is refused).
    pub fn owner_check(mut self, check: OwnerCheck<'a>, limit: u64) -> Self {
        self.owner_check = Some((check, limit));
        self
    }

    /// Writes `bytes` to `path` atomically (see the module documentation). On error the old file
    /// is untouched and no temporary file is left.
    pub fn write(&self, path: &Path, bytes: &[u8]) -> Result<Outcome, WriteError> {
        let name = path.file_name().ok_or_else(|| WriteError::NoFileName {
            path: path.to_path_buf(),
        })?;
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let need_content = self.skip_unchanged || self.owner_check.is_some();
        let limit = match self.owner_check {
            Some((_, limit)) => limit,
            None => u64::try_from(bytes.len()).unwrap_or(u64::MAX),
        };
        let existing = Existing::open(path, need_content.then_some(limit))?;
        if let Some(old) = &existing {
            if self.skip_unchanged && old.content.as_deref() == Some(bytes) {
                if !self.keep_mode {
                    old.set_mode(path, self.mode)?;
                }
                return Ok(Outcome::Unchanged);
            }
            if let Some((check, limit)) = self.owner_check {
                let Some(content) = &old.content else {
                    return Err(WriteError::TooLarge {
                        path: path.to_path_buf(),
                        limit,
                    });
                };
                check(content).map_err(|reason| WriteError::NotOurs {
                    path: path.to_path_buf(),
                    reason,
                })?;
            }
        }
        let mode = match &existing {
            Some(old) if self.keep_mode => old.mode,
            _ => self.mode,
        };
        let owner = existing
            .as_ref()
            .filter(|_| self.keep_owner)
            .map(|o| o.owner);
        self.publish(dir, name, path, bytes, mode, owner)?;
        Ok(Outcome::Written)
    }

    /// Temporary file, content, owner, mode, fsync, rename, fsync of `dir`; on error the
    /// temporary file is removed.
    fn publish(
        &self,
        dir: &Path,
        name: &std::ffi::OsStr,
        path: &Path,
        bytes: &[u8],
        mode: u32,
        owner: Option<(u32, u32)>,
    ) -> Result<(), WriteError> {
        let (tmp, file) = create_temp(dir, name)?;
        let result = self.fill_and_rename(file, &tmp, path, bytes, mode, owner);
        if let Err(e) = result {
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
        if self.durable {
            sync_dir(dir);
        }
        Ok(())
    }

    fn fill_and_rename(
        &self,
        mut file: File,
        tmp: &Path,
        path: &Path,
        bytes: &[u8],
        mode: u32,
        owner: Option<(u32, u32)>,
    ) -> Result<(), WriteError> {
        file.write_all(bytes)
            .map_err(|e| WriteError::io(Step::Write, tmp, e))?;
        if let Some((uid, gid)) = owner {
            let _ = std::os::unix::fs::fchown(&file, Some(uid), Some(gid));
        }
        // After the chown (which clears set-id bits), and exact: the umask applied at open.
        file.set_permissions(Permissions::from_mode(mode))
            .map_err(|e| WriteError::io(Step::Chmod, tmp, e))?;
        if self.durable {
            file.sync_all()
                .map_err(|e| WriteError::io(Step::Fsync, tmp, e))?;
        }
        fs::rename(tmp, path).map_err(|e| WriteError::io(Step::Rename, path, e))
    }
}

/// [`AtomicWriter::new`]`(mode).write(path, bytes)`: a durable write with a fixed mode.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<(), WriteError> {
    AtomicWriter::new(mode).write(path, bytes).map(|_| ())
}

/// A new temporary file `.<name>.tmp-<pid>-<n>` in `dir`, mode 0600 until it is complete.
fn create_temp(dir: &Path, name: &std::ffi::OsStr) -> Result<(PathBuf, File), WriteError> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let name = name.to_string_lossy();
    let pid = std::process::id();
    let mut last = None;
    // A name can be taken only by a temporary file a crashed process of the same pid left.
    for _ in 0..100 {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let tmp = dir.join(format!(".{name}.tmp-{pid}-{n}"));
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC)
            .open(&tmp)
        {
            Ok(file) => return Ok((tmp, file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(WriteError::io(Step::CreateTemp, dir, e)),
        }
    }
    let e = last.unwrap_or_else(|| io::Error::from(io::ErrorKind::AlreadyExists));
    Err(WriteError::io(Step::CreateTemp, dir, e))
}

/// Makes a rename durable. Not every file system can fsync a directory; the file itself is
/// complete either way, so a failure is only logged.
fn sync_dir(dir: &Path) {
    if let Err(e) = File::open(dir).and_then(|d| d.sync_all()) {
        tracing::debug!(dir = %dir.display(), error = %e, "cannot fsync directory");
    }
}

#[cfg(test)]
mod tests;
