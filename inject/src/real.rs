//! The real [`Syscalls`]: every path inside the container root is resolved with openat2
//! `RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS` (lookups and `mkdir -p` directly, see the `openat2`
//! module; pathrs where the kernel has no openat2), and every mutation goes through the resulting
//! fd or the parent directory fd — never through a re-resolved path string (CVE-2024-0132 /
//! CVE-2025-23359). Every entry is created by the `create` module, as the owner of its directory
//! (no confused deputy, see the `owner` module).

use std::ffi::CString;
use std::fs::Permissions;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use pathrs::flags::OpenFlags;
use pathrs::Root;

pub(crate) use crate::create::fd_kind;
use crate::create::{c_name, open_host_path, Dir};
use crate::error::{pathrs_io, InjectError, Result};
use crate::mountapi;
use crate::openat2;
use crate::owner::{host_user, mount_id, owner_of, Trust};
use crate::sys::{DirFacts, EntryKind, MountOptions, Syscalls};

/// Largest file [`Syscalls::read_file`] reads (our own config files are tiny).
const MAX_READ: u64 = 1 << 20;

/// [`Syscalls`] on a real container root opened with pathrs.
#[derive(Debug)]
pub struct PathrsSyscalls {
    root: Root,
    root_path: PathBuf,
    /// Who acts in which directory (see `owner`).
    trust: Trust,
}

impl PathrsSyscalls {
    /// Open the container root. The host path is trusted (it comes from the runtime's bundle), so
    /// it is canonicalised first; everything below it is not. `user` is the container process's
    /// user (in-container ids; see [`PathrsSyscalls::host_user`]), when the caller knows it.
    pub fn open(rootfs: &Path, user: Option<(u32, u32)>) -> Result<Self> {
        let canonical = rootfs
            .canonicalize()
            .map_err(|source| InjectError::OpenRoot {
                path: rootfs.to_path_buf(),
                error: source,
            })?;
        let root = Root::open(&canonical).map_err(|e| InjectError::OpenRoot {
            path: canonical.clone(),
            error: pathrs_io(e),
        })?;
        let open_err = |error| InjectError::OpenRoot {
            path: canonical.clone(),
            error,
        };
        let (root_owner, root_group) = owner_of(root.as_fd()).map_err(open_err)?;
        let mut own_mounts = vec![mount_id(root.as_fd()).map_err(open_err)?];
        // The runtime's /dev (a tmpfs it made for this container): device nodes go there.
        if let Ok(dev) = openat2::open_in_root(root.as_fd(), Path::new("/dev"), false) {
            own_mounts.push(mount_id(dev.as_fd()).map_err(open_err)?);
        }
        let trust = Trust {
            root_owner,
            own_mounts,
            user: user.map(|u| host_user(u, (root_owner, root_group))),
        };
        Ok(PathrsSyscalls {
            root,
            root_path: canonical,
            trust,
        })
    }

    /// The O_PATH fd of the root directory.
    pub fn root_fd(&self) -> BorrowedFd<'_> {
        self.root.as_fd()
    }

    fn err(&self, op: &'static str, path: &Path, source: io::Error) -> InjectError {
        InjectError::InRoot {
            op,
            root: self.root_path.clone(),
            path: path.to_path_buf(),
            error: source,
        }
    }

    fn perr(&self, op: &'static str, path: &Path, e: pathrs::error::Error) -> InjectError {
        self.err(op, path, pathrs_io(e))
    }

    /// An O_PATH fd on `path` inside the root (the last component followed only when `follow`):
    /// one raw openat2, or pathrs where the kernel has none.
    fn open_in_root(&self, path: &Path, follow: bool) -> io::Result<OwnedFd> {
        match openat2::open_in_root(self.root.as_fd(), path, follow) {
            Err(e) if openat2::unsupported(&e) => {
                let h = if follow {
                    self.root.resolve(path)
                } else {
                    self.root.resolve_nofollow(path)
                };
                h.map(OwnedFd::from).map_err(pathrs_io)
            }
            other => other,
        }
    }

    /// Resolve without following the last component; `None` on ENOENT.
    fn resolve_nofollow(&self, path: &Path) -> Result<Option<OwnedFd>> {
        match self.open_in_root(path, false) {
            Ok(h) => Ok(Some(h)),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
            Err(e) => Err(self.err("resolve", path, e)),
        }
    }

    /// The parent directory of `path` (links followed inside the root) and the last component.
    fn parent(&self, op: &'static str, path: &Path) -> Result<(OwnedFd, CString)> {
        let name = path
            .file_name()
            .ok_or_else(|| self.err(op, path, io::Error::from_raw_os_error(libc::EINVAL)))?;
        let parent = path.parent().unwrap_or(Path::new("/"));
        let fd = self
            .open_in_root(parent, true)
            .map_err(|e| self.err(op, path, e))?;
        let name = c_name(name).map_err(|e| self.err(op, path, e))?;
        Ok((fd, name))
    }

    fn dir<'a>(&'a self, fd: &'a OwnedFd) -> Dir<'a> {
        Dir {
            fd: fd.as_fd(),
            trust: &self.trust,
        }
    }
}

/// A temp sibling name for atomic replace of `name`; unique per process and call.
fn temp_name(name: &CString) -> CString {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut tmp = b".".to_vec();
    tmp.extend_from_slice(name.as_bytes());
    tmp.extend_from_slice(format!(".gpuhook-{}-{n}", std::process::id()).as_bytes());
    CString::new(tmp).expect("no NUL in a name without NUL")
}

impl Syscalls for PathrsSyscalls {
    fn root_path(&self) -> &Path {
        &self.root_path
    }

    fn lstat(&self, path: &Path) -> Result<Option<EntryKind>> {
        match self.resolve_nofollow(path)? {
            None => Ok(None),
            Some(h) => fd_kind(h.as_fd())
                .map(Some)
                .map_err(|e| self.err("stat", path, e)),
        }
    }

    fn dir_facts(&self, path: &Path) -> Result<DirFacts> {
        let fd = self
            .open_in_root(path, true)
            .map_err(|e| self.err("stat", path, e))?;
        let facts = owner_of(fd.as_fd()).and_then(|owner| Ok((owner, mount_id(fd.as_fd())?)));
        let (owner, mount) = facts.map_err(|e| self.err("stat", path, e))?;
        Ok(DirFacts { owner, mount })
    }

    fn trust(&self) -> &Trust {
        &self.trust
    }

    fn host_stat(&self, path: &Path) -> Result<Option<EntryKind>> {
        let md = match std::fs::metadata(path) {
            Ok(md) => md,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(InjectError::Io {
                    op: "stat host path",
                    path: path.to_path_buf(),
                    error: source,
                })
            }
        };
        let ft = md.file_type();
        Ok(Some(if ft.is_dir() {
            EntryKind::Directory
        } else if ft.is_file() {
            EntryKind::File
        } else if ft.is_char_device() {
            use std::os::unix::fs::MetadataExt;
            EntryKind::CharDevice {
                major: libc::major(md.rdev()),
                minor: libc::minor(md.rdev()),
            }
        } else {
            EntryKind::Other
        }))
    }

    fn mkdir_all(&self, path: &Path, mode: u32) -> Result<()> {
        let open = |p: &Path| self.open_in_root(p, true);
        openat2::mkdir_all_in_root(open, &self.trust, path, mode).map_err(|e| {
            if matches!(e.raw_os_error(), Some(libc::ENOTDIR) | Some(libc::ELOOP)) {
                let op = "mkdir -p (a component is a file, or a symlink dangling inside the \
                          root; fix the image)";
                self.err(op, path, e)
            } else {
                self.err("mkdir -p", path, e)
            }
        })
    }

    fn create_file(&self, path: &Path, mode: u32) -> Result<()> {
        let (parent, name) = self.parent("create file", path)?;
        let file = self
            .dir(&parent)
            .create_file(&name, mode, false)
            .map_err(|e| self.err("create file", path, e))?;
        let md = file.metadata().map_err(|e| self.err("stat", path, e))?;
        if !md.is_file() {
            return Err(InjectError::WrongType {
                path: path.to_path_buf(),
                found: "not a regular file",
                expected: "a regular file",
            });
        }
        Ok(())
    }

    fn mknod_char(
        &self,
        path: &Path,
        major: u32,
        minor: u32,
        mode: u32,
        uid: u32,
        gid: u32,
    ) -> Result<()> {
        let (parent, name) = self.parent("mknod", path)?;
        let dir = self.dir(&parent);
        dir.mknod_char(&name, mode, libc::makedev(major, minor))
            .map_err(|e| self.err("mknod", path, e))?;
        let h = dir
            .open_path(&name)
            .map_err(|e| self.err("open created node", path, e))?;
        // Re-check what we hold: a racing container process could have swapped the name.
        match fd_kind(h.as_fd()).map_err(|e| self.err("stat", path, e))? {
            EntryKind::CharDevice { major: m, minor: n } if m == major && n == minor => {}
            other => {
                return Err(InjectError::Refused {
                    path: path.to_path_buf(),
                    reason: format!("node was replaced by {} after mknod", other.describe()),
                })
            }
        }
        dir.fix_mode_owner(h.as_fd(), mode, uid, gid)
            .map_err(|e| self.err("chmod/chown", path, e))
    }

    fn chmod_chown(&self, path: &Path, mode: u32, uid: u32, gid: u32) -> Result<()> {
        let (parent, name) = self.parent("open", path)?;
        let dir = self.dir(&parent);
        let h = dir
            .open_path(&name)
            .map_err(|e| self.err("open", path, e))?;
        if let EntryKind::Symlink(_) = fd_kind(h.as_fd()).map_err(|e| self.err("stat", path, e))? {
            return Err(InjectError::Refused {
                path: path.to_path_buf(),
                reason: "will not chmod/chown through a symlink".into(),
            });
        }
        dir.fix_mode_owner(h.as_fd(), mode, uid, gid)
            .map_err(|e| self.err("chmod/chown", path, e))
    }

    fn symlink(&self, target: &Path, link: &Path) -> Result<()> {
        let (parent, name) = self.parent("symlink", link)?;
        let dir = self.dir(&parent);
        let target = c_name(target.as_os_str()).map_err(|e| self.err("symlink", link, e))?;
        // A new link is made in place (symlinkat is atomic and never follows the name); only an
        // existing one is replaced through a temp name and rename.
        match dir.symlink(&target, &name) {
            Ok(()) => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
            Err(e) => return Err(self.err("symlink", link, e)),
        }
        let tmp = temp_name(&name);
        dir.symlink(&target, &tmp)
            .map_err(|e| self.err("symlink", link, e))?;
        if let Err(e) = dir.rename(&tmp, &name) {
            let _ = dir.unlink(&tmp);
            return Err(self.err("rename symlink into place", link, e));
        }
        Ok(())
    }

    fn write_file(&self, path: &Path, contents: &[u8], mode: u32) -> Result<()> {
        let (parent, name) = self.parent("create temp file", path)?;
        let dir = self.dir(&parent);
        let tmp = temp_name(&name);
        let mut file = dir
            .create_file(&tmp, mode, true)
            .map_err(|e| self.err("create temp file", path, e))?;
        // No fsync: these are files in a container root (ld.so.conf drop-ins), which does not
        // outlive a host crash in any useful way; temp + rename already keeps readers from ever
        // seeing half a file, and an fsync costs milliseconds on every container start.
        let written = file
            .write_all(contents)
            .and_then(|()| file.set_permissions(Permissions::from_mode(mode)));
        drop(file);
        if let Err(e) = written {
            let _ = dir.unlink(&tmp);
            return Err(self.err("write", path, e));
        }
        if let Err(e) = dir.rename(&tmp, &name) {
            let _ = dir.unlink(&tmp);
            return Err(self.err("rename into place", path, e));
        }
        Ok(())
    }

    fn read_file(&self, path: &Path) -> Result<Vec<u8>> {
        let h = self
            .root
            .resolve(path)
            .map_err(|e| self.perr("resolve", path, e))?;
        if fd_kind(h.as_fd()).map_err(|e| self.err("stat", path, e))? != EntryKind::File {
            return Err(InjectError::WrongType {
                path: path.to_path_buf(),
                found: "not a regular file",
                expected: "a regular file",
            });
        }
        let file = h
            .reopen(OpenFlags::O_RDONLY | OpenFlags::O_CLOEXEC)
            .map_err(|e| self.perr("open", path, e))?;
        let mut buf = Vec::new();
        file.take(MAX_READ)
            .read_to_end(&mut buf)
            .map_err(|e| self.err("read", path, e))?;
        Ok(buf)
    }

    fn bind_mount(&self, host_src: &Path, dst: &Path, opts: MountOptions) -> Result<()> {
        let merr = |step, source| InjectError::Mount {
            src: host_src.to_path_buf(),
            dst: self.root_path.join(dst.strip_prefix("/").unwrap_or(dst)),
            step,
            error: source,
        };
        let src = open_host_path(host_src).map_err(|e| merr("open source", e))?;
        let src_is_dir =
            fd_kind(src.as_fd()).map_err(|e| merr("stat source", e))? == EntryKind::Directory;
        // Follow symlinks *within* the root for the destination (like runc's securejoin): a
        // library path that is a symlink in the image gets the mount on its in-root target.
        let target = self
            .open_in_root(dst, true)
            .map_err(|e| merr("resolve destination", e))?;
        let dst_kind = fd_kind(target.as_fd()).map_err(|e| merr("stat destination", e))?;
        if (dst_kind == EntryKind::Directory) != src_is_dir {
            return Err(InjectError::WrongType {
                path: dst.to_path_buf(),
                found: dst_kind.describe(),
                expected: if src_is_dir {
                    "a directory"
                } else {
                    "a non-directory"
                },
            });
        }
        let tree =
            mountapi::clone_tree(src.as_fd(), src_is_dir).map_err(|e| merr("open_tree", e))?;
        mountapi::set_attrs(tree.as_fd(), opts, src_is_dir)
            .map_err(|e| merr("mount_setattr", e))?;
        mountapi::attach(tree.as_fd(), target.as_fd()).map_err(|e| merr("move_mount", e))?;
        tracing::debug!(src = %host_src.display(), dst = %dst.display(), ?opts, "bind mounted");
        Ok(())
    }

    fn unmount(&self, dst: &Path) -> Result<()> {
        let h = self
            .root
            .resolve(dst)
            .map_err(|e| self.perr("resolve", dst, e))?;
        mountapi::detach(h.as_fd()).map_err(|e| self.err("umount", dst, e))
    }
}
