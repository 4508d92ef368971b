//! The optional tmpfs that the control daemon and its clients share as `/dev/shm`.
//!
//! MPS clients and servers exchange data through POSIX shared memory. A container has its own
//! `/dev/shm`, so clients in containers and a daemon on the host only meet when both see the same
//! tmpfs there: we mount one per GPU at `<mpsRoot>/<uuid>/shm`; the daemon gets it as `/dev/shm`
//! in a private mount namespace (see [`crate::control`]) and containers get it mounted the same
//! way by whoever starts them.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use nix::mount::{mount, umount2, MntFlags, MsFlags};

/// True when `path` is a mount point (its device differs from its parent's).
pub fn is_mount_point(path: &Path) -> bool {
    let (Ok(me), Some(parent)) = (std::fs::metadata(path), path.parent()) else {
        return false;
    };
    std::fs::metadata(parent)
        .map(|p| p.dev() != me.dev())
        .unwrap_or(false)
}

/// Why the shared tmpfs could not be mounted or unmounted (the errno is part of the message).
#[derive(Debug, thiserror::Error)]
pub enum ShmError {
    #[error("mpsDaemon.shmSize needs root to mount a tmpfs on {}; run as root or remove shmSize", path.display())]
    NotRoot { path: PathBuf },
    #[error("cannot mount tmpfs on {}: {errno}", path.display())]
    Mount { path: PathBuf, errno: nix::Error },
    #[error("cannot unmount {}: {errno}", path.display())]
    Unmount { path: PathBuf, errno: nix::Error },
}

/// Mounts a tmpfs of `size` bytes on `path` (nosuid, nodev, mode 1777). Needs root.
pub fn mount_tmpfs(path: &Path, size: u64) -> Result<(), ShmError> {
    if !nix::unistd::geteuid().is_root() {
        return Err(ShmError::NotRoot {
            path: path.to_path_buf(),
        });
    }
    let data = format!("size={size},mode=1777");
    mount(
        Some("tmpfs"),
        path,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(data.as_str()),
    )
    .map_err(|errno| ShmError::Mount {
        path: path.to_path_buf(),
        errno,
    })
}

/// Lazily unmounts `path` (clients may still hold it open).
pub fn unmount(path: &Path) -> Result<(), ShmError> {
    umount2(path, MntFlags::MNT_DETACH).map_err(|errno| ShmError::Unmount {
        path: path.to_path_buf(),
        errno,
    })
}
