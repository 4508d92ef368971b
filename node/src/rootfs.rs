//! Symlink resolution confined to a driver root.
//!
//! The paths the driver root's `ld.so.cache` gives are paths *inside* that root, and its symlinks
//! (`libcuda.so.1 -> libcuda.so.570.158.01`, merged-usr `/lib -> usr/lib`) must be followed inside
//! it too: an absolute link target means the root's `/`, and `..` never climbs above the root.
//! `std::fs::canonicalize` would do neither, and costs a syscall per component for every file; the
//! resolver remembers every component it has resolved, so a library directory is walked once and
//! each further file costs one `readlink`.
//!
//! Every look-up is relative to a descriptor, not a long host path the kernel would walk again
//! from `/` for each file: the root is opened once (`O_PATH`) and a path is looked up relative to
//! it (`readlinkat(root, "usr/lib/...")`); a folder many files are looked up in (a library folder)
//! is opened too, and its files are then one name each (`readlinkat(dir, "libcuda.so.1")`).
//! Opening every folder would cost more than it saves: an `openat` and its `close` cost about two
//! look-ups, and a look-up saves only a fraction of that for each component it skips. Discovery
//! asks its other questions (does this exist, is this a file) through [`RootResolver::exists`]
//! and [`RootResolver::is_file`], relative to those descriptors too.

use std::collections::{HashMap, HashSet};
use std::ffi::{CStr, CString, OsStr, OsString};
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path, PathBuf};

use crate::inventory::join_under;

/// Most symlinks followed while resolving one path (Linux's limit).
pub(crate) const MAX_LINKS: u32 = 40;

/// Flags of a folder descriptor: a handle for `*at` calls only, never followed through a link.
const DIR_FLAGS: libc::c_int =
    libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;

/// An open folder of the resolver (an index into its descriptors).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DirId(usize);

/// Resolves paths inside `root`, caching resolved components.
#[derive(Debug)]
pub struct RootResolver {
    root: PathBuf,
    /// In-root path → (resolved path, links followed to resolve it), so a cache hit still
    /// counts toward the 40-link budget of the walk that uses it, as the kernel would.
    cache: HashMap<PathBuf, (PathBuf, u32)>,
    /// Resolved paths known not to exist (discovery probes many optional well-known paths).
    missing: HashSet<PathBuf>,
    /// Resolved in-root folder → its descriptor in `fds`: the root (`/`), opened on first use,
    /// and the folders opened for the many look-ups to come ([`RootResolver::resolve_dir`]).
    dirs: HashMap<PathBuf, DirId>,
    fds: Vec<OwnedFd>,
}

impl RootResolver {
    pub fn new(root: &Path) -> Self {
        RootResolver {
            root: root.to_path_buf(),
            cache: HashMap::new(),
            missing: HashSet::new(),
            dirs: HashMap::new(),
            fds: Vec::new(),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Host path of a path inside the root (no resolution).
    pub fn host(&self, path: &Path) -> PathBuf {
        join_under(&self.root, path)
    }

    /// Resolves every symlink of the absolute in-root `path`, inside the root. Returns the in-root
    /// path of the real file. Fails when a component is missing (`NotFound`), or with `ELOOP` when
    /// the walk would follow more than 40 links in total (the kernel's MAXSYMLINKS), whatever
    /// the shape of the link graph.
    pub fn resolve(&mut self, path: &Path) -> io::Result<PathBuf> {
        self.resolve_links(path).map(|(real, _)| real)
    }

    /// [`RootResolver::resolve`], with the number of links the walk followed.
    pub(crate) fn resolve_links(&mut self, path: &Path) -> io::Result<(PathBuf, u32)> {
        let mut links = 0;
        let real = self.resolve_counting(path, &mut links)?;
        Ok((real, links))
    }

    /// Resolves the folder `path` and opens it, for the many look-ups to come in it: its real
    /// in-root path, the links followed and its descriptor.
    pub(crate) fn resolve_dir(&mut self, path: &Path) -> io::Result<(PathBuf, u32, DirId)> {
        let (real, links) = self.resolve_links(path)?;
        let id = self.dir(&real)?;
        Ok((real, links, id))
    }

    /// Whether `path` exists inside the root as `lstat` sees it: its folder is resolved in the
    /// root, its last component is not followed (a dangling link exists).
    pub fn exists(&mut self, path: &Path) -> bool {
        let Some((dir, name)) = self.parent_of(path) else {
            return self.resolve(path).is_ok();
        };
        let next = dir.join(name);
        if self.cache.contains_key(&next) {
            return true;
        }
        if self.missing.contains(&next) {
            return false;
        }
        let Ok((fd, at)) = self.at(&dir, &next, name) else {
            return false;
        };
        match readlink_at(self.fd(fd), at) {
            Ok(_) => true,
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                self.cache.insert(next.clone(), (next, 0));
                true
            }
            Err(e) => {
                self.note_missing(next, &e);
                false
            }
        }
    }

    /// Whether `path` resolves inside the root to a regular file.
    pub fn is_file(&mut self, path: &Path) -> bool {
        let Some((dir, name)) = self.parent_of(path) else {
            return false;
        };
        let next = dir.join(name);
        let Ok((fd, at)) = self.at(&dir, &next, name) else {
            return false;
        };
        match lstat_at(self.fd(fd), at).map(|st| st.st_mode & libc::S_IFMT) {
            Ok(libc::S_IFREG) => true,
            Ok(libc::S_IFLNK) => match self.resolve(path) {
                Ok(real) if real != path => self.is_file(&real),
                _ => false,
            },
            _ => false,
        }
    }

    /// The resolved folder of `path` and its last name; `None` for `/` or a path ending in `..`.
    fn parent_of<'p>(&mut self, path: &'p Path) -> Option<(PathBuf, &'p OsStr)> {
        let (name, parent) = (path.file_name()?, path.parent()?);
        // An opened folder is a resolved real one: no walk (extra links ask in library folders).
        if self.dirs.contains_key(parent) {
            return Some((parent.to_path_buf(), name));
        }
        Some((self.resolve(parent).ok()?, name))
    }

    /// Where to look `name` up in the resolved folder `dir` (`next` is `dir` + `name`): the
    /// folder's descriptor and `name` when it is open, else the root's and `next` relative to it.
    fn at<'n>(
        &mut self,
        dir: &Path,
        next: &'n Path,
        name: &'n OsStr,
    ) -> io::Result<(DirId, &'n OsStr)> {
        if let Some(id) = self.dirs.get(dir) {
            return Ok((*id, name));
        }
        let root = self.dir(Path::new("/"))?;
        let rel = next.strip_prefix("/").unwrap_or(next);
        Ok((root, rel.as_os_str()))
    }

    /// The descriptor of the resolved in-root folder `dir` (a path the walk made), opened on
    /// first use relative to the root; `O_NOFOLLOW`, so a link is refused (ENOTDIR).
    fn dir(&mut self, dir: &Path) -> io::Result<DirId> {
        if let Some(id) = self.dirs.get(dir) {
            return Ok(*id);
        }
        let rel = dir.strip_prefix("/").unwrap_or(dir);
        let fd = if rel.as_os_str().is_empty() {
            // The root itself: its host path may go through links, as every host path did.
            open_dir_at(
                libc::AT_FDCWD,
                self.root.as_os_str(),
                DIR_FLAGS & !libc::O_NOFOLLOW,
            )?
        } else {
            let root = self.dir(Path::new("/"))?;
            open_dir_at(self.fd(root).as_raw_fd(), rel.as_os_str(), DIR_FLAGS)?
        };
        Ok(self.keep_dir(dir.to_path_buf(), fd))
    }

    fn keep_dir(&mut self, dir: PathBuf, fd: OwnedFd) -> DirId {
        let id = DirId(self.fds.len());
        self.fds.push(fd);
        self.dirs.insert(dir, id);
        id
    }

    /// The descriptor of an opened folder.
    pub(crate) fn fd(&self, id: DirId) -> BorrowedFd<'_> {
        self.fds[id.0].as_fd()
    }

    /// A resolution already made: the real path of in-root `path` (whose folder is resolved)
    /// and the links it took.
    pub(crate) fn cached(&self, path: &Path) -> Option<(&Path, u32)> {
        self.cache.get(path).map(|(p, n)| (p.as_path(), *n))
    }

    /// Records a resolution made outside the walk (see [`RootResolver::cached`]).
    pub(crate) fn remember(&mut self, path: PathBuf, real: PathBuf, links: u32) {
        self.cache.insert(path, (real, links));
    }

    /// Records that the resolved `path` failed with `error`, when that says it does not exist.
    pub(crate) fn note_missing(&mut self, path: PathBuf, error: &io::Error) {
        if error.kind() == io::ErrorKind::NotFound {
            self.missing.insert(path);
        }
    }

    /// Resolves `path`, adding the links it follows to `links` (the whole walk's total).
    fn resolve_counting(&mut self, path: &Path, links: &mut u32) -> io::Result<PathBuf> {
        let mut cur = PathBuf::from("/");
        for comp in path.components() {
            match comp {
                Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
                // `cur` is already resolved, so lexical `..` is right; at `/` it stays at `/`.
                Component::ParentDir => {
                    cur.pop();
                }
                Component::Normal(name) => cur = self.step(&cur, name, links)?,
            }
        }
        Ok(cur)
    }

    /// Resolves `name` in the resolved folder `cur`: `readlinkat`, whose `EINVAL` says "not a
    /// link" (a file in the middle of a path then fails with ENOTDIR, as in the kernel).
    fn step(&mut self, cur: &Path, name: &OsStr, links: &mut u32) -> io::Result<PathBuf> {
        let eloop = || io::Error::from_raw_os_error(libc::ELOOP);
        let next = cur.join(name);
        if let Some((hit, used)) = self.cache.get(&next) {
            *links = links.saturating_add(*used);
            if *links > MAX_LINKS {
                return Err(eloop());
            }
            return Ok(hit.clone());
        }
        if self.missing.contains(&next) {
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        }
        let (fd, at) = self.at(cur, &next, name)?;
        let before = *links;
        let resolved = match readlink_at(self.fd(fd), at) {
            Ok(target) => {
                *links += 1;
                if *links > MAX_LINKS {
                    return Err(eloop());
                }
                let target = if target.is_absolute() {
                    target
                } else {
                    cur.join(target)
                };
                self.resolve_counting(&target, links)?
            }
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => next.clone(),
            Err(e) => {
                self.note_missing(next, &e);
                return Err(e);
            }
        };
        self.cache.insert(next, (resolved.clone(), *links - before));
        Ok(resolved)
    }
}

/// Runs `f` with `name` (a name or a relative path) as a C string, on the stack when it is short.
fn with_c_name<T>(name: &OsStr, f: impl FnOnce(&CStr) -> io::Result<T>) -> io::Result<T> {
    let nul = || io::Error::new(io::ErrorKind::InvalidInput, "file name contains a NUL byte");
    let bytes = name.as_bytes();
    let mut buf = [0u8; 256];
    match buf.get_mut(..=bytes.len()) {
        Some(slot) => {
            slot[..bytes.len()].copy_from_slice(bytes);
            f(CStr::from_bytes_with_nul(slot).map_err(|_| nul())?)
        }
        None => f(&CString::new(bytes).map_err(|_| nul())?),
    }
}

/// `openat(dir, name, flags)` for a folder descriptor.
fn open_dir_at(dir: RawFd, name: &OsStr, flags: libc::c_int) -> io::Result<OwnedFd> {
    with_c_name(name, |c| {
        // SAFETY: `c` is a NUL-terminated string that outlives the call; `dir` is AT_FDCWD or
        // an open descriptor owned by the caller; no pointer is kept.
        let fd = unsafe { libc::openat(dir, c.as_ptr(), flags) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just opened here and nothing else owns it.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    })
}

/// `readlinkat(dir, name)`: the link's target, `EINVAL` when `name` is not a link.
pub(crate) fn readlink_at(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<PathBuf> {
    with_c_name(name, |c| {
        // Targets are short: a stack buffer first, a heap one of PATH_MAX only for a long one.
        let mut small = [0u8; 256];
        let n = readlink_into(dir, c, &mut small)?;
        if let Some(target) = small.get(..n).filter(|_| n < small.len()) {
            return Ok(PathBuf::from(OsStr::from_bytes(target)));
        }
        let mut big = vec![0u8; 4096];
        let n = readlink_into(dir, c, &mut big)?;
        if n >= big.len() {
            return Err(io::Error::from_raw_os_error(libc::ENAMETOOLONG));
        }
        big.truncate(n);
        Ok(PathBuf::from(OsString::from_vec(big)))
    })
}

/// One `readlinkat` into `buf`; the number of bytes it wrote.
fn readlink_into(dir: BorrowedFd<'_>, name: &CStr, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `name` is NUL-terminated, `buf` is writable for `buf.len()` bytes and `dir` is an
    // open descriptor; readlinkat writes at most `buf.len()` bytes and keeps no pointer.
    let n = unsafe {
        libc::readlinkat(
            dir.as_raw_fd(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`: `lstat` relative to a folder descriptor.
pub(crate) fn lstat_at(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<libc::stat> {
    with_c_name(name, |c| {
        let mut st = MaybeUninit::<libc::stat>::uninit();
        // SAFETY: `c` is NUL-terminated, `st` is writable for one `stat`, `dir` is an open
        // descriptor; fstatat keeps no pointer.
        let rc = unsafe {
            libc::fstatat(
                dir.as_raw_fd(),
                c.as_ptr(),
                st.as_mut_ptr(),
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fstatat returned 0, so it filled `st`.
        Ok(unsafe { st.assume_init() })
    })
}

/// `open(path, O_PATH|O_DIRECTORY)` of a host folder (following links, as a host path does).
pub(crate) fn open_host_dir(path: &Path) -> io::Result<OwnedFd> {
    open_dir_at(
        libc::AT_FDCWD,
        path.as_os_str(),
        DIR_FLAGS & !libc::O_NOFOLLOW,
    )
}

#[cfg(test)]
#[path = "rootfs_tests.rs"]
mod tests;
