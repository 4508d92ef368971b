//! One gpu-mps-daemon per MPS root: an exclusive `flock` on `<mpsRoot>/.lock`.
//!
//! Two instances on one root would start two control daemons per pipe directory and delete each
//! other's ready files. The lock is released by the kernel when the holder dies, so a crashed
//! instance never blocks the next one; the file carries the holder's pid for the error message.

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};

use crate::layout::lock_path;

/// Why the root lock could not be taken (the I/O error or errno is part of the message).
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("cannot open lock file {}: {error}", path.display())]
    Open {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("another gpu-mps-daemon ({holder}) already manages MPS root {} (lock {} is held: {errno}); stop it or use a different mpsRoot", root.display(), path.display())]
    Held {
        holder: String,
        root: PathBuf,
        path: PathBuf,
        errno: nix::Error,
    },
    #[error("cannot write lock file {}: {error}", path.display())]
    Write {
        path: PathBuf,
        error: std::io::Error,
    },
}

/// A held lock; dropping it releases the lock (the file stays unless [`RootLock::release`]).
#[derive(Debug)]
pub struct RootLock {
    file: Flock<File>,
    path: PathBuf,
    created: bool,
}

impl RootLock {
    /// Takes the lock or fails naming the holder's pid.
    pub fn acquire(mps_root: &Path) -> Result<Self, LockError> {
        let path = lock_path(mps_root);
        let created = !path.exists();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o644)
            .open(&path)
            .map_err(|error| LockError::Open {
                path: path.clone(),
                error,
            })?;
        let mut file = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(f) => f,
            Err((mut f, errno)) => {
                let mut text = String::new();
                let _ = f.read_to_string(&mut text);
                let holder = match text.trim().parse::<u32>() {
                    Ok(pid) => format!("pid {pid}"),
                    Err(_) => "another process".to_string(),
                };
                return Err(LockError::Held {
                    holder,
                    root: mps_root.to_path_buf(),
                    path,
                    errno,
                });
            }
        };
        let pid = std::process::id().to_string();
        let write = (|| {
            file.set_len(0)?;
            file.rewind()?;
            file.write_all(pid.as_bytes())?;
            file.flush()
        })();
        write.map_err(|error| LockError::Write {
            path: path.clone(),
            error,
        })?;
        Ok(RootLock {
            file,
            path,
            created,
        })
    }

    /// Removes the lock file if we created it, then releases the lock.
    pub fn release(self) {
        if self.created {
            let _ = std::fs::remove_file(&self.path);
        }
        drop(self.file);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_lock_names_the_holder() {
        let t = tempfile::tempdir().unwrap();
        let first = RootLock::acquire(t.path()).unwrap();
        let err = RootLock::acquire(t.path()).unwrap_err().to_string();
        assert!(
            err.contains(&format!("pid {}", std::process::id())),
            "{err}"
        );
        first.release();
        assert!(!t.path().join(".lock").exists());
        RootLock::acquire(t.path()).unwrap().release();
    }
}
