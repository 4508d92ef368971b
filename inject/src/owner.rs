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
//! Mounts (issue 22, D10). The owner rule alone let root act in a directory root owns on *another
//! mount*: an image that links `/etc` or a library folder into a read-write volume of a root-owned
//! host directory (a `hostPath`, a shared cache) got root-made files there, in the host's tree.
//! So the mount of every directory written into is compared (`statx` `STATX_MNT_ID` of its fd)
//! with the container's own: the root filesystem's and the runtime's `/dev` (a tmpfs it made for
//! this container, where device nodes must be made). Root-owned and on another mount, gpuhook
//! acts there as the container's user (the host ids of `process.user`), with exactly the rights
//! the container has there itself; where that user is root (the container could write there
//! anyway) as root; and where the user is not known, it refuses. NVIDIA's hook writes there as
//! root without a look; a container it would have started with a file made by root in a host
//! directory now fails to start, naming the directory, unless its user may write there.
//!
//! Why stricter than runc: runc's destinations are the config author's choice; gpuhook's come from
//! the driver's layout (`/usr/lib/x86_64-linux-gnu`, `/dev`, `/etc/ld.so.conf.d`) and land wherever
//! the image or a volume puts those directories, so a non-root container would otherwise get files
//! made by root in a host directory it controls. Bind mounts themselves change no directory and
//! stay as they are (they live in the container's mount namespace only).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

#[cfg(test)]
#[path = "owner_tests.rs"]
mod tests;

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

/// What gpuhook knows of a container root, for [`decide`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trust {
    /// Owner of the root directory (0, or the uid root maps to in a user namespace).
    pub root_owner: u32,
    /// Mounts gpuhook writes to as root: the root filesystem's and the runtime's `/dev`.
    pub own_mounts: Vec<u64>,
    /// The container process's user, as host ids; `None` when the caller does not know it.
    pub user: Option<(u32, u32)>,
}

/// Who to act as in a directory (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    /// As this process (root): the image's own tree.
    AsRoot,
    /// With these filesystem ids: the directory's owner, or the container's user on a volume.
    As { uid: u32, gid: u32 },
    /// Not at all: root-owned, on another mount, and the container's user unknown.
    Refuse,
}

/// The rule, given the directory's owner and group and its mount id.
pub fn decide(owner: (u32, u32), mount: u64, trust: &Trust) -> Act {
    let (uid, gid) = owner;
    if uid != trust.root_owner {
        return Act::As { uid, gid };
    }
    if trust.own_mounts.contains(&mount) {
        return Act::AsRoot;
    }
    match trust.user {
        Some((u, _)) if u == trust.root_owner => Act::AsRoot,
        Some((uid, gid)) => Act::As { uid, gid },
        None => Act::Refuse,
    }
}

/// The mount id of the file `fd` refers to: `statx` `STATX_MNT_ID` (Linux 5.8), else the `mnt_id`
/// line of `/proc/self/fdinfo/<fd>` (Linux 3.15), so kernels such as RHEL 8's 4.18 work too.
///
/// `statx` is called as a raw syscall: the release build's glibc floor (2.17) has no `statx`
/// wrapper (it came with glibc 2.28), and a missing syscall (`ENOSYS`, Linux < 4.11) is the
/// same case as a kernel without the mount-id field.
pub(crate) fn mount_id(fd: BorrowedFd<'_>) -> io::Result<u64> {
    match statx_mount_id(fd) {
        Ok(Some(id)) => Ok(id),
        Ok(None) => fdinfo_mount_id(fd),
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => fdinfo_mount_id(fd),
        Err(e) => Err(e),
    }
}

/// `STATX_MNT_ID` of `fd`, `None` when the kernel does not report it.
fn statx_mount_id(fd: BorrowedFd<'_>) -> io::Result<Option<u64>> {
    // SAFETY: an all-zero `statx` is a valid value to be overwritten by the kernel.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    let empty = c"";
    // SAFETY: the statx syscall with AT_EMPTY_PATH on a live fd, a NUL-terminated empty path
    // and a valid out pointer of the kernel's `struct statx` layout.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_statx,
            fd.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
            libc::STATX_MNT_ID,
            std::ptr::addr_of_mut!(stx),
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((stx.stx_mask & libc::STATX_MNT_ID != 0).then_some(stx.stx_mnt_id))
}

/// The `mnt_id:` line of `/proc/self/fdinfo/<fd>` (a few hundred bytes; read bounded).
fn fdinfo_mount_id(fd: BorrowedFd<'_>) -> io::Result<u64> {
    use std::io::Read;
    let path = format!("/proc/self/fdinfo/{}", fd.as_raw_fd());
    let mut text = String::new();
    std::fs::File::open(&path)?
        .take(64 * 1024)
        .read_to_string(&mut text)?;
    parse_fdinfo_mount_id(&text).ok_or_else(|| {
        io::Error::other(format!(
            "{path} has no mnt_id line (Linux 3.15+ needed to tell mounts apart)"
        ))
    })
}

/// The value of the `mnt_id:` line of an fdinfo text.
fn parse_fdinfo_mount_id(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("mnt_id:"))
        .and_then(|v| v.trim().parse().ok())
}

/// The host ids of the container's user: as they are, or shifted by the ids of the root
/// directory's owner for a user-namespaced container (whose root maps to them: the usual
/// single-range mapping).
pub(crate) fn host_user(user: (u32, u32), root: (u32, u32)) -> (u32, u32) {
    (root.0.saturating_add(user.0), root.1.saturating_add(user.1))
}

/// Message of a refused write (see [`Act::Refuse`]).
pub const REFUSED: &str = "the directory is on a mount other than the container's root \
    filesystem (a volume) and owned by root, and the container's user is not known: gpuhook \
    does not write there as root; mount the volume elsewhere, or do not link this folder of the \
    image into it";

/// Act in the directory `dir` as [`decide`] says (see the module docs).
pub(crate) fn act_in(dir: BorrowedFd<'_>, trust: &Trust) -> io::Result<ActAs> {
    let owner = owner_of(dir)?;
    let (uid, gid) = match decide(owner, mount_id(dir)?, trust) {
        Act::AsRoot => return Ok(ActAs { prev: None }),
        Act::Refuse => return Err(io::Error::new(io::ErrorKind::PermissionDenied, REFUSED)),
        Act::As { uid, gid } => (uid, gid),
    };
    tracing::debug!(
        uid,
        gid,
        owner = owner.0,
        "creating with another user's rights"
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
