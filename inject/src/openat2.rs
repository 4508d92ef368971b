//! The hot-path lookups inside a container root, done with one raw `openat2(RESOLVE_IN_ROOT |
//! RESOLVE_NO_MAGICLINKS)` each.
//!
//! Why not pathrs for these: pathrs resolves the same way, but a *missing* path (the common case
//! while injecting: every mountpoint is new) makes it inspect procfs to build its error message,
//! and its `mkdir_all` re-opens handles through procfs; that was ~60 extra syscalls per
//! mountpoint, a few milliseconds per container start. The kernel does the confinement either
//! way; pathrs stays the fallback where `openat2` is missing (kernel < 5.6, or a seccomp filter
//! that refuses it) and does everything else.

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use crate::create::{c_name, Dir};
use crate::owner::Trust;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

/// `RESOLVE_NO_MAGICLINKS` and `RESOLVE_IN_ROOT` from `<linux/openat2.h>`.
const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
const RESOLVE_IN_ROOT: u64 = 0x10;

/// How often a lookup is retried when the kernel reports a racing rename (EAGAIN).
const EAGAIN_RETRIES: usize = 32;

/// `struct open_how` of `openat2(2)`.
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// Whether `err` means "this kernel (or its seccomp filter) has no openat2": use the fallback.
pub(crate) fn unsupported(err: &io::Error) -> bool {
    matches!(err.raw_os_error(), Some(libc::ENOSYS) | Some(libc::EPERM))
}

/// Open `path` (absolute, normalised: no `.`/`..`) inside `root` as an `O_PATH` fd; symlinks are
/// followed inside the root, the last one only when `follow`. Magic links are refused.
pub(crate) fn open_in_root(root: BorrowedFd<'_>, path: &Path, follow: bool) -> io::Result<OwnedFd> {
    let rel = path.strip_prefix("/").unwrap_or(path);
    let rel: &OsStr = if rel.as_os_str().is_empty() {
        OsStr::new(".")
    } else {
        rel.as_os_str()
    };
    let c = CString::new(rel.as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))?;
    let mut flags = libc::O_PATH | libc::O_CLOEXEC;
    if !follow {
        flags |= libc::O_NOFOLLOW;
    }
    let how = OpenHow {
        // open_how.flags holds the open(2) flag bits of the int.
        flags: u64::from(flags.cast_unsigned()),
        mode: 0,
        resolve: RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
    };
    for _ in 0..EAGAIN_RETRIES {
        // SAFETY: openat2 with a live dirfd, a NUL-terminated path and a fully initialised
        // `open_how` of the size we pass; it returns a new descriptor or -1.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                root.as_raw_fd(),
                c.as_ptr(),
                &how as *const OpenHow,
                std::mem::size_of::<OpenHow>(),
            )
        };
        if fd >= 0 {
            // SAFETY: a fresh descriptor owned by nobody else.
            return Ok(unsafe {
                OwnedFd::from_raw_fd(
                    libc::c_int::try_from(fd).expect("the kernel returns an int fd"),
                )
            });
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EAGAIN) {
            return Err(err);
        }
    }
    Err(io::Error::from_raw_os_error(libc::EAGAIN))
}

/// `mkdir -p` of `path` inside the root. `open` opens an absolute in-root path, following links
/// inside the root ([`open_in_root`], or pathrs where openat2 is missing). Existing components
/// (symlinks included, followed inside the root) are used; each missing one is made with
/// `mkdirat` in its parent's fd, as that directory's owner (see the `owner` module), and opened
/// with `O_NOFOLLOW | O_DIRECTORY`, so a name swapped for a symlink by a racing container process
/// makes this fail rather than follow it. A component that exists but is not a directory (or a
/// symlink dangling inside the root) fails with ENOTDIR or ELOOP.
pub(crate) fn mkdir_all_in_root(
    open: impl Fn(&Path) -> io::Result<OwnedFd>,
    trust: &Trust,
    path: &Path,
    mode: u32,
) -> io::Result<()> {
    let names: Vec<&OsStr> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n),
            _ => None,
        })
        .collect();
    if path.components().any(|c| c == Component::ParentDir) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "path has `..` components",
        ));
    }
    // The deepest existing prefix, searched from the full path backwards (usually it exists).
    let mut existing = names.len();
    let mut dir = loop {
        let prefix: std::path::PathBuf = names[..existing].iter().collect();
        match open(&Path::new("/").join(&prefix)) {
            Ok(fd) => break fd,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) && existing > 0 => existing -= 1,
            Err(e) => return Err(e),
        }
    };
    for name in &names[existing..] {
        let c = c_name(name)?;
        let parent = Dir {
            fd: dir.as_fd(),
            trust,
        };
        parent.mkdir(&c, mode)?;
        dir = parent.open_dir(&c)?;
    }
    // The final fd must be a directory (a followed symlink to a file is not).
    // SAFETY: an all-zero `stat` is a valid value to be overwritten by fstat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `dir` is a live descriptor and `st` a valid out pointer.
    if unsafe { libc::fstat(dir.as_raw_fd(), &mut st) } < 0 {
        return Err(io::Error::last_os_error());
    }
    if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
        return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp_root(tag: &str) -> (std::path::PathBuf, std::fs::File) {
        let d = std::env::temp_dir().join(format!("gpuhook-openat2-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let f = std::fs::File::open(&d).unwrap();
        (d, f)
    }

    /// The root's own mount (the test's temp dir), its owner root.
    fn trust(root: &impl AsFd) -> crate::owner::Trust {
        crate::owner::Trust {
            root_owner: 0,
            own_mounts: vec![crate::owner::mount_id(root.as_fd()).unwrap()],
            user: None,
        }
    }

    #[test]
    fn absolute_symlinks_resolve_inside_the_root_never_on_the_host() {
        let (d, f) = tmp_root("abs");
        std::os::unix::fs::symlink("/etc", d.join("escape")).unwrap();
        // Inside the root, /etc does not exist: ENOENT, not the host's /etc.
        let err = open_in_root(f.as_fd(), Path::new("/escape/passwd"), true).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOENT), "{err}");
        // mkdir -p through it creates the directory inside the root.
        std::fs::create_dir(d.join("real")).unwrap();
        std::os::unix::fs::symlink("/real", d.join("etc")).unwrap();
        std::fs::remove_file(d.join("escape")).unwrap();
        mkdir_all_in_root(
            |p| open_in_root(f.as_fd(), p, true),
            &trust(&f),
            Path::new("/etc/ld.so.conf.d"),
            0o755,
        )
        .unwrap();
        assert!(d.join("real/ld.so.conf.d").is_dir());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn relative_escapes_stop_at_the_root() {
        let (d, f) = tmp_root("rel");
        std::fs::create_dir(d.join("tmp")).unwrap();
        std::os::unix::fs::symlink("../../../../../../../tmp", d.join("up")).unwrap();
        mkdir_all_in_root(
            |p| open_in_root(f.as_fd(), p, true),
            &trust(&f),
            Path::new("/up/x"),
            0o755,
        )
        .unwrap();
        // `..` above the root is the root: the directory lands at <root>/tmp/x.
        assert!(d.join("tmp/x").is_dir());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn nofollow_sees_the_link_itself_and_non_directories_are_refused() {
        let (d, f) = tmp_root("nofollow");
        std::os::unix::fs::symlink("/nowhere", d.join("dangling")).unwrap();
        std::fs::write(d.join("file"), b"").unwrap();
        assert!(open_in_root(f.as_fd(), Path::new("/dangling"), false).is_ok());
        assert_eq!(
            open_in_root(f.as_fd(), Path::new("/dangling"), true)
                .unwrap_err()
                .raw_os_error(),
            Some(libc::ENOENT)
        );
        let e = mkdir_all_in_root(
            |p| open_in_root(f.as_fd(), p, true),
            &trust(&f),
            Path::new("/file/sub"),
            0o755,
        )
        .unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOTDIR), "{e}");
        let e = mkdir_all_in_root(
            |p| open_in_root(f.as_fd(), p, true),
            &trust(&f),
            Path::new("/dangling/sub"),
            0o755,
        )
        .unwrap_err();
        assert!(
            matches!(e.raw_os_error(), Some(libc::ENOTDIR) | Some(libc::ELOOP)),
            "{e}"
        );
        assert!(!Path::new("/nowhere").exists());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
