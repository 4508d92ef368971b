//! Running code inside another process' mount namespace.
//!
//! A prestart hook runs in the host namespaces while runc has already built the container's mount
//! namespace (rootfs not yet pivoted): mounts must be made *there*, or they would land in the host
//! mount table and never be seen by the container.
//!
//! Design: a dedicated thread that first `unshare(CLONE_FS)` and then `setns(CLONE_NEWNS)`.
//! setns into a mount namespace is refused (EINVAL) for a thread that shares its fs_struct (root,
//! cwd, umask) with other threads; unsharing CLONE_FS gives this one thread its own, so the rest of
//! the process (tokio workers, the test harness) stays in the host namespace. A thread is more
//! robust than fork() here: no async-signal-safety constraints after fork in a multi-threaded
//! process, the closure can borrow from the caller, and its result (or error, or panic) comes back
//! through the join handle without serialisation. The thread exits afterwards, so its namespace
//! never leaks into a thread pool.

use std::fs::File;
use std::os::fd::AsRawFd;

use crate::error::{InjectError, Result};

/// Run `f` in the mount namespace of `pid` and return its result. Mounts `f` makes stay in that
/// namespace. Open a [`crate::ContainerRoot`] *inside* `f`: fds opened in the host namespace refer
/// to host mounts, which cannot be mount targets from the container's namespace.
pub fn in_mount_namespace_of<F, R>(pid: i32, f: F) -> Result<R>
where
    F: FnOnce() -> R + Send,
    R: Send,
{
    let ns_path = format!("/proc/{pid}/ns/mnt");
    let ns = File::open(&ns_path).map_err(|source| InjectError::MountNamespace {
        pid,
        step: "open /proc/<pid>/ns/mnt",
        error: source,
    })?;
    std::thread::scope(|scope| {
        let handle = std::thread::Builder::new()
            .name(format!("mntns-{pid}"))
            .spawn_scoped(scope, move || -> Result<R> {
                // SAFETY: unshare(CLONE_FS) only affects the calling thread's fs_struct.
                if unsafe { libc::unshare(libc::CLONE_FS) } < 0 {
                    return Err(InjectError::MountNamespace {
                        pid,
                        step: "unshare(CLONE_FS)",
                        error: std::io::Error::last_os_error(),
                    });
                }
                // SAFETY: setns with a live namespace fd; this thread no longer shares its
                // fs_struct, so only this thread changes mount namespace.
                if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNS) } < 0 {
                    return Err(InjectError::MountNamespace {
                        pid,
                        step: "setns(CLONE_NEWNS)",
                        error: std::io::Error::last_os_error(),
                    });
                }
                drop(ns);
                Ok(f())
            })
            .map_err(|source| InjectError::MountNamespace {
                pid,
                step: "spawn thread",
                error: source,
            })?;
        handle.join().map_err(|_| InjectError::MountNamespace {
            pid,
            step: "injection thread panicked",
            error: std::io::Error::other("panic"),
        })?
    })
}
