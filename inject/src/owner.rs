//! No confused deputy: what gpuhook creates in a container root, it creates as the owner of the
//! directory it creates it in.
//!
//! The rule. Every entry gpuhook makes (a mountpoint directory or file, a symlink, the ld.so.conf
//! drop-in, a device node) is made with `*at` syscalls in the fd of its parent directory,
//! resolved inside the root. Before the syscall, the parent is `fstat`ed:
//! - owned by the container root's owner (uid 0, or the uid that root maps to for a user-namespaced
//!   container: the owner of the root directory itself): the image's own tree, made and owned by
//!   the runtime. The entry is made as root, as runc makes the destination of a config's bind
//!   mount (`libcontainer/rootfs_linux.go`, `mountToRootfs` -> `createIfNotExists`, run by
//!   `runc init` as the container's root: no uid switch, whoever owns the directory);
//! - owned by anyone else: a volume, a bind-mounted host directory, a home the container's user
//!   owns. That user controls it, and root must not act there on our behalf: the calling thread's
//!   filesystem uid and gid are switched to the directory's owner and group (`setfsuid`,
//!   `setfsgid`: per thread, no fork, no process start) for the one syscall. The kernel then checks
//!   it against that user's permissions (a read-only volume fails with EACCES), the entry belongs
//!   to them, and the capabilities that only root's fsuid carries (DAC override, CAP_MKNOD,
//!   CAP_CHOWN, CAP_FOWNER) are not in effect: a device node is never made in, nor chown'ed in, a
//!   directory a container's user owns. (The thread keeps the hook's supplementary groups:
//!   switching them is process-wide in libc. A directory writable only through one of those
//!   groups stays writable.)
//!
//! Why stricter than runc: runc's destinations are the config author's choice; gpuhook's come from
//! the driver's layout (`/usr/lib/x86_64-linux-gnu`, `/dev`, `/etc/ld.so.conf.d`) and land wherever
//! the image or a volume puts those directories, so a non-root container would otherwise get files
//! made by root in a host directory it controls. Bind mounts themselves change no directory and
//! stay as they are (they live in the container's mount namespace only).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// The filesystem ids of the calling thread, switched for as long as it lives.
#[must_use = "the ids are switched back when the guard is dropped"]
pub(crate) struct ActAs {
    prev: Option<(u32, u32)>,
}

/// Owner and group of the directory `fd` refers to.
pub(crate) fn owner_of(fd: BorrowedFd<'_>) -> io::Result<(u32, u32)> {
    // SAFETY: an all-zero `stat` is a valid value to be overwritten by fstat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is a live descriptor and `st` a valid out pointer.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((st.st_uid, st.st_gid))
}

/// `setfsuid`/`setfsgid` of the calling thread; returns the previous id, checked to have changed.
fn set_fs_ids(uid: u32, gid: u32) -> io::Result<(u32, u32)> {
    // SAFETY: the raw syscalls change only the calling thread's fsgid/fsuid and return the old
    // value; a call with -1 (invalid) changes nothing and returns the current one.
    let (old_gid, old_uid, now_uid, now_gid) = unsafe {
        let old_gid = libc::syscall(libc::SYS_setfsgid, gid);
        let old_uid = libc::syscall(libc::SYS_setfsuid, uid);
        let now_uid = libc::syscall(libc::SYS_setfsuid, u32::MAX);
        let now_gid = libc::syscall(libc::SYS_setfsgid, u32::MAX);
        (old_gid, old_uid, now_uid, now_gid)
    };
    let id = |v: libc::c_long| u32::try_from(v).unwrap_or(u32::MAX);
    if id(now_uid) != uid || id(now_gid) != gid {
        return Err(io::Error::from_raw_os_error(libc::EPERM));
    }
    Ok((id(old_uid), id(old_gid)))
}

/// Act in the directory `dir` as its owner, unless it is `root_owner`'s (see the module docs).
pub(crate) fn act_as_owner_of(dir: BorrowedFd<'_>, root_owner: u32) -> io::Result<ActAs> {
    let (uid, gid) = owner_of(dir)?;
    if uid == root_owner {
        return Ok(ActAs { prev: None });
    }
    tracing::debug!(
        uid,
        gid,
        "creating as the owner of a directory root does not own"
    );
    let prev = set_fs_ids(uid, gid)?;
    Ok(ActAs { prev: Some(prev) })
}

impl Drop for ActAs {
    fn drop(&mut self) {
        if let Some((uid, gid)) = self.prev {
            // Back to what the thread had (CAP_SETUID/CAP_SETGID are not filesystem
            // capabilities: the switch kept them).
            if let Err(e) = set_fs_ids(uid, gid) {
                // The thread would go on with another user's file access rights: never.
                tracing::error!(error = %e, "cannot restore the filesystem ids; aborting");
                std::process::abort();
            }
        }
    }
}
