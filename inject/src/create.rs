//! Creating entries in a directory fd (resolved inside the root), one component at a time, never
//! following a link at the name, each as the directory's owner (see the `owner` module). This is
//! where every entry gpuhook makes in a container root is made.

use std::ffi::{CStr, CString, OsStr};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::mountapi;
use crate::owner::{act_in, Trust};
use crate::sys::EntryKind;

/// A NUL-terminated single component.
pub(crate) fn c_name(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))
}

fn owned(fd: libc::c_int) -> io::Result<OwnedFd> {
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn rc(r: libc::c_int) -> io::Result<()> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// A directory of the root, with what decides who acts in it (see the `owner` module).
#[derive(Clone, Copy)]
pub(crate) struct Dir<'a> {
    pub fd: BorrowedFd<'a>,
    pub trust: &'a Trust,
}

impl Dir<'_> {
    /// `mkdirat` (EEXIST is fine: created meanwhile, or not a directory, which the caller's
    /// `open_dir` tells).
    pub fn mkdir(&self, name: &CStr, mode: u32) -> io::Result<()> {
        let _as = act_in(self.fd, self.trust)?;
        // SAFETY: mkdirat in a live directory fd with a single-component, NUL-terminated name.
        match rc(unsafe { libc::mkdirat(self.fd.as_raw_fd(), name.as_ptr(), mode) }) {
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => Ok(()),
            other => other,
        }
    }

    /// Opens the directory `name` (never a link).
    pub fn open_dir(&self, name: &CStr) -> io::Result<OwnedFd> {
        let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        // SAFETY: openat of a single component in a live directory fd; never follows a link.
        owned(unsafe { libc::openat(self.fd.as_raw_fd(), name.as_ptr(), flags) })
    }

    /// An O_PATH fd on `name` itself (a link is not followed).
    pub fn open_path(&self, name: &CStr) -> io::Result<OwnedFd> {
        let flags = libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        // SAFETY: as in `open_dir`.
        owned(unsafe { libc::openat(self.fd.as_raw_fd(), name.as_ptr(), flags) })
    }

    /// Opens `name`, creating it as an empty regular file when missing (an existing link is not
    /// followed: ELOOP).
    pub fn create_file(&self, name: &CStr, mode: u32, excl: bool) -> io::Result<File> {
        let _as = act_in(self.fd, self.trust)?;
        // O_NONBLOCK: a FIFO swapped in meanwhile must not block the hook.
        let mut flags = libc::O_CREAT | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK;
        flags |= if excl {
            libc::O_EXCL | libc::O_WRONLY
        } else {
            libc::O_RDONLY
        };
        // SAFETY: openat of a single component in a live directory fd with a mode.
        let fd = owned(unsafe {
            libc::openat(
                self.fd.as_raw_fd(),
                name.as_ptr(),
                flags,
                mode as libc::c_uint,
            )
        })?;
        Ok(File::from(fd))
    }

    /// `mknodat` a character device.
    pub fn mknod_char(&self, name: &CStr, mode: u32, dev: libc::dev_t) -> io::Result<()> {
        let _as = act_in(self.fd, self.trust)?;
        let mode = libc::S_IFCHR | (mode & 0o7777);
        // SAFETY: mknodat in a live directory fd with a single-component name.
        rc(unsafe { libc::mknodat(self.fd.as_raw_fd(), name.as_ptr(), mode, dev) })
    }

    /// `symlinkat(target, name)`.
    pub fn symlink(&self, target: &CStr, name: &CStr) -> io::Result<()> {
        let _as = act_in(self.fd, self.trust)?;
        // SAFETY: symlinkat with two NUL-terminated strings and a live directory fd.
        rc(unsafe { libc::symlinkat(target.as_ptr(), self.fd.as_raw_fd(), name.as_ptr()) })
    }

    /// `renameat(from, to)` within this directory.
    pub fn rename(&self, from: &CStr, to: &CStr) -> io::Result<()> {
        let _as = act_in(self.fd, self.trust)?;
        let fd = self.fd.as_raw_fd();
        // SAFETY: renameat of two single components within one live directory fd.
        rc(unsafe { libc::renameat(fd, from.as_ptr(), fd, to.as_ptr()) })
    }

    /// `unlinkat(name)` (cleanup of our own temp names; errors ignored by callers).
    pub fn unlink(&self, name: &CStr) -> io::Result<()> {
        let _as = act_in(self.fd, self.trust)?;
        // SAFETY: unlinkat of a single component in a live directory fd.
        rc(unsafe { libc::unlinkat(self.fd.as_raw_fd(), name.as_ptr(), 0) })
    }

    /// Sets exact mode and owner of `node` (an fd in this directory) as this directory's
    /// owner: in a directory a container's user owns, chown to another user fails (EPERM).
    pub fn fix_mode_owner(
        &self,
        node: BorrowedFd<'_>,
        mode: u32,
        uid: u32,
        gid: u32,
    ) -> io::Result<()> {
        let _as = act_in(self.fd, self.trust)?;
        fix_mode_owner(node, mode, uid, gid)
    }
}

/// Classify an fd (O_PATH fds are fine for fstat and readlinkat).
pub(crate) fn fd_kind(fd: BorrowedFd<'_>) -> io::Result<EntryKind> {
    // SAFETY: an all-zero `stat` is a valid value to be overwritten by fstat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is a live descriptor and `st` a valid out pointer.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(match st.st_mode & libc::S_IFMT {
        libc::S_IFDIR => EntryKind::Directory,
        libc::S_IFREG => EntryKind::File,
        libc::S_IFCHR => EntryKind::CharDevice {
            major: libc::major(st.st_rdev),
            minor: libc::minor(st.st_rdev),
        },
        libc::S_IFLNK => EntryKind::Symlink(readlink_fd(fd)?),
        _ => EntryKind::Other,
    })
}

fn readlink_fd(fd: BorrowedFd<'_>) -> io::Result<PathBuf> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    let empty = CString::default();
    // SAFETY: readlinkat on an O_PATH symlink fd with an empty path reads the link itself; `buf`
    // is valid for `buf.len()` bytes.
    let n = unsafe {
        libc::readlinkat(
            fd.as_raw_fd(),
            empty.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    buf.truncate(n.unsigned_abs());
    Ok(PathBuf::from(
        <std::ffi::OsString as std::os::unix::ffi::OsStringExt>::from_vec(buf),
    ))
}

/// Set exact mode and owner through an O_PATH fd (mknod/creat are subject to the umask).
fn fix_mode_owner(fd: BorrowedFd<'_>, mode: u32, uid: u32, gid: u32) -> io::Result<()> {
    let empty = CString::default();
    // SAFETY: fchownat with AT_EMPTY_PATH acts on the inode `fd` refers to; the path is empty.
    let rc = unsafe {
        libc::fchownat(
            fd.as_raw_fd(),
            empty.as_ptr(),
            uid,
            gid,
            libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    let path = mountapi::fd_path(fd);
    // SAFETY: chmod through the fd's magic link reaches exactly the inode we hold (O_PATH fds
    // cannot be fchmod'ed); the path is a valid NUL-terminated string.
    if unsafe { libc::chmod(path.as_ptr(), mode & 0o7777) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// An O_PATH fd on a (trusted) host path.
pub(crate) fn open_host_path(path: &Path) -> io::Result<OwnedFd> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))?;
    // SAFETY: open with a valid NUL-terminated path; O_PATH needs no mode.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fresh descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
