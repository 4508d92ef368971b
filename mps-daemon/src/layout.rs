//! Files and directories under the MPS root, and how they are created and removed.
//!
//! ```text
//! <mpsRoot>/.lock              flock held by the running daemon (contains its pid)
//! <mpsRoot>/status.json        per-GPU state, rewritten atomically
//! <mpsRoot>/<uuid>/pipe/       CUDA_MPS_PIPE_DIRECTORY (control socket, pid file)
//! <mpsRoot>/<uuid>/log/        CUDA_MPS_LOG_DIRECTORY
//! <mpsRoot>/<uuid>/shm/        optional tmpfs shared as /dev/shm
//! <mpsRoot>/<uuid>/ready       exists only while limits are applied and the daemon answers
//! <mpsRoot>/<uuid>/control-daemon.id   pid and start time of the running control daemon
//! <mpsRoot>/<uuid>/control-daemon.err  its stderr (start-up errors)
//! ```
//!
//! Containers get `pipe/` (and `shm/`) and can write there: nothing we rely on is kept in them.
//! The control daemon's own pid file in `pipe/` is never read.
//!
//! Shutdown must leave the root as it found it, so we remember which directories we created and
//! remove exactly those.

use std::fs;
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

/// Paths of one GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuLayout {
    pub dir: PathBuf,
    pub pipe: PathBuf,
    pub log: PathBuf,
    pub shm: PathBuf,
    pub ready: PathBuf,
}

impl GpuLayout {
    pub fn new(mps_root: &Path, uuid: &str) -> Self {
        let dir = mps_root.join(uuid);
        GpuLayout {
            pipe: dir.join("pipe"),
            log: dir.join("log"),
            shm: dir.join("shm"),
            ready: dir.join("ready"),
            dir,
        }
    }

    pub fn control_socket(&self) -> PathBuf {
        self.pipe.join("control")
    }
}

/// Path of the status file.
pub fn status_path(mps_root: &Path) -> PathBuf {
    mps_root.join("status.json")
}

/// Path of the lock file.
pub fn lock_path(mps_root: &Path) -> PathBuf {
    mps_root.join(".lock")
}

/// Directories created by us, removed (deepest first) by [`CreatedDirs::remove_all`].
#[derive(Debug, Default)]
pub struct CreatedDirs(Vec<PathBuf>);

impl CreatedDirs {
    /// Creates `dir` and missing parents with `mode` (whatever the umask: a non-root client's
    /// MPS server must search each of them), remembering each one created.
    pub fn ensure(&mut self, dir: &Path, mode: u32) -> io::Result<()> {
        let mut missing = Vec::new();
        let mut cur = Some(dir);
        while let Some(p) = cur {
            if p.exists() {
                break;
            }
            missing.push(p.to_path_buf());
            cur = p.parent();
        }
        for p in missing.into_iter().rev() {
            match fs::DirBuilder::new().mode(mode).create(&p) {
                Ok(()) => {
                    use std::os::unix::fs::PermissionsExt;
                    fs::set_permissions(&p, fs::Permissions::from_mode(mode))?;
                    self.0.push(p)
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("cannot create {}: {e}", p.display()),
                    ))
                }
            }
        }
        Ok(())
    }

    /// Removes every directory we created, contents included, deepest first.
    pub fn remove_all(&mut self) -> Vec<String> {
        let mut errors = Vec::new();
        while let Some(p) = self.0.pop() {
            if let Err(e) = fs::remove_dir_all(&p) {
                if e.kind() != io::ErrorKind::NotFound {
                    errors.push(format!("cannot remove {}: {e}", p.display()));
                }
            }
        }
        errors
    }

    pub fn contains(&self, p: &Path) -> bool {
        self.0.iter().any(|d| d == p)
    }
}

/// Runs a blocking file-system or driver call on the blocking pool, bounded by `timeout`: a
/// slow disk, a huge directory a tenant filled, or a hung driver call must not stall the
/// supervisor (the call itself cannot be cancelled; it finishes on its own thread).
pub async fn blocking<T: Send + 'static, E: Into<BoxError> + Send + 'static>(
    what: &str,
    timeout: std::time::Duration,
    f: impl FnOnce() -> Result<T, E> + Send + 'static,
) -> Result<T, BlockingError> {
    match tokio::time::timeout(timeout, tokio::task::spawn_blocking(f)).await {
        Ok(Ok(r)) => r.map_err(|e| BlockingError::Failed(e.into())),
        Ok(Err(error)) => Err(BlockingError::Panicked {
            what: what.to_string(),
            error,
        }),
        Err(_) => Err(BlockingError::TimedOut {
            what: what.to_string(),
            timeout,
        }),
    }
}

/// Any error of a call run by [`blocking`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why a call run by [`blocking`] gave no result.
#[derive(Debug, thiserror::Error)]
pub enum BlockingError {
    /// The call's own error, as it says it.
    #[error("{0}")]
    Failed(BoxError),
    #[error("{what}: {error}")]
    Panicked {
        what: String,
        error: tokio::task::JoinError,
    },
    #[error("{what}: no result within {timeout:?}")]
    TimedOut {
        what: String,
        timeout: std::time::Duration,
    },
}

/// Removes a file, ignoring "not found".
pub fn remove_file_if_exists(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Removes everything inside `dir` (not `dir` itself): stale sockets and pid files.
pub fn clean_dir(dir: &Path) -> io::Result<()> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let p = entry.path();
        if entry.file_type()?.is_dir() {
            fs::remove_dir_all(&p)?;
        } else {
            remove_file_if_exists(&p)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_dirs_are_removed_and_others_kept() {
        let t = tempfile::tempdir().unwrap();
        let keep = t.path().join("keep");
        fs::create_dir(&keep).unwrap();
        let mut c = CreatedDirs::default();
        c.ensure(&keep.join("a/b/c"), 0o755).unwrap();
        c.ensure(&keep.join("a/b/c"), 0o755).unwrap();
        fs::write(keep.join("a/b/c/f"), "x").unwrap();
        assert!(c.contains(&keep.join("a")));
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(keep.join("a/b")).unwrap().permissions().mode() & 0o777;
        assert_eq!(
            mode, 0o755,
            "the umask does not narrow what clients must search"
        );
        assert!(c.remove_all().is_empty());
        assert!(keep.exists());
        assert!(!keep.join("a").exists());
    }

    #[test]
    fn clean_dir_empties_the_directory() {
        let t = tempfile::tempdir().unwrap();
        fs::write(t.path().join("ready"), b"two").unwrap();
        fs::create_dir(t.path().join("sub")).unwrap();
        clean_dir(t.path()).unwrap();
        assert_eq!(fs::read_dir(t.path()).unwrap().count(), 0);
    }

    #[test]
    fn socket_path_is_under_pipe() {
        let l = GpuLayout::new(Path::new("/run/m"), "GPU-1");
        assert_eq!(
            l.control_socket(),
            PathBuf::from("/run/m/GPU-1/pipe/control")
        );
    }
}
