//! Thin wrappers over the new mount API (open_tree / mount_setattr / move_mount, Linux >= 5.12).
//!
//! Why not `mount("/proc/self/fd/SRC", "/proc/self/fd/DST", MS_BIND)` + `MS_REMOUNT`? Because the
//! remount has to name the *new* mount, and the only handle we hold (the O_PATH fd of the
//! mountpoint) still points at the mount *underneath* — remounting through it would make the
//! container's rootfs read-only, and re-resolving the path string to find the new mount is exactly
//! the TOCTOU pattern of CVE-2024-0132. With the new API we clone the source into a detached mount,
//! set its flags while nobody can see it, and attach it onto the fd we resolved inside the root.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use crate::sys::MountOptions;

const OPEN_TREE_CLONE: libc::c_uint = 1;
const OPEN_TREE_CLOEXEC: libc::c_uint = libc::O_CLOEXEC as libc::c_uint;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
const MOVE_MOUNT_T_EMPTY_PATH: libc::c_uint = 0x40;
const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_NOSUID: u64 = 0x2;
const MOUNT_ATTR_NODEV: u64 = 0x4;
const MOUNT_ATTR_NOEXEC: u64 = 0x8;

/// `struct mount_attr` from linux/mount.h.
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

fn empty() -> CString {
    CString::default()
}

/// Clone the mount tree at `src` (an fd opened in the caller's mount namespace) into a detached
/// mount. `recursive` copies submounts too (rbind).
pub(crate) fn clone_tree(src: BorrowedFd<'_>, recursive: bool) -> io::Result<OwnedFd> {
    let path = empty();
    let mut flags = OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | libc::AT_EMPTY_PATH as libc::c_uint;
    if recursive {
        flags |= libc::AT_RECURSIVE as libc::c_uint;
    }
    // SAFETY: open_tree takes a dirfd, a NUL-terminated path (empty, with AT_EMPTY_PATH) and flags;
    // all pointers are valid for the duration of the call.
    let fd = unsafe { libc::syscall(libc::SYS_open_tree, src.as_raw_fd(), path.as_ptr(), flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new file descriptor that nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(i32::try_from(fd).expect("the kernel returns an int fd")) })
}

/// Apply `opts` (and make it private) on a detached mount tree before it is attached.
pub(crate) fn set_attrs(
    tree: BorrowedFd<'_>,
    opts: MountOptions,
    recursive: bool,
) -> io::Result<()> {
    let mut set = 0;
    if opts.read_only {
        set |= MOUNT_ATTR_RDONLY;
    }
    if opts.nosuid {
        set |= MOUNT_ATTR_NOSUID;
    }
    if opts.nodev {
        set |= MOUNT_ATTR_NODEV;
    }
    if opts.noexec {
        set |= MOUNT_ATTR_NOEXEC;
    }
    let attr = MountAttr {
        attr_set: set,
        attr_clr: 0,
        propagation: libc::MS_PRIVATE,
        userns_fd: 0,
    };
    let path = empty();
    let mut flags = libc::AT_EMPTY_PATH as libc::c_uint;
    if recursive {
        flags |= libc::AT_RECURSIVE as libc::c_uint;
    }
    // SAFETY: mount_setattr reads `size_of::<MountAttr>()` bytes from `attr`, which is a live,
    // correctly laid out `struct mount_attr`; the path is an empty NUL-terminated string.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            path.as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Attach the detached mount `tree` onto the inode `dst` refers to.
pub(crate) fn attach(tree: BorrowedFd<'_>, dst: BorrowedFd<'_>) -> io::Result<()> {
    let path = empty();
    // SAFETY: move_mount takes two (dirfd, path) pairs and flags; both paths are valid empty
    // NUL-terminated strings used with the *_EMPTY_PATH flags.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            path.as_ptr(),
            dst.as_raw_fd(),
            path.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The `/proc/thread-self/fd/N` magic link of an fd, for the few syscalls that only take paths.
pub(crate) fn fd_path(fd: BorrowedFd<'_>) -> CString {
    CString::new(format!("/proc/thread-self/fd/{}", fd.as_raw_fd()))
        .expect("formatted fd path has no NUL")
}

/// Lazily detach the mount whose root `fd` refers to.
pub(crate) fn detach(fd: BorrowedFd<'_>) -> io::Result<()> {
    let path = fd_path(fd);
    // SAFETY: umount2 takes a valid NUL-terminated path and flags.
    let rc = unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
