//! [`ContainerRoot`]: the decisions about *what* to do in a container root (create a mountpoint,
//! leave an identical symlink alone, refuse to replace a file with a link, ...). The *how* is the
//! [`Syscalls`] implementation; the real one resolves every path with openat2 `RESOLVE_IN_ROOT`, so
//! a symlink planted by the image (`/usr/lib/x86_64-linux-gnu -> /etc`, `/dev -> ../../..`) is
//! followed *inside* the root and can never make us create or mount anything on the host.

use std::os::fd::BorrowedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use crate::error::{InjectError, Result};
use crate::owner::{decide, Act, REFUSED};
use crate::real::PathrsSyscalls;
use crate::sys::{EntryKind, MountOptions, Syscalls};

/// What [`ContainerRoot::symlink`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SymlinkOutcome {
    Created,
    /// A symlink with another target was atomically replaced.
    Replaced,
    /// An identical symlink already existed.
    Unchanged,
}

/// A character device to expose in the container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CharDeviceSpec {
    pub major: u32,
    pub minor: u32,
    /// Permission bits (e.g. 0o666).
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
}

/// How [`ContainerRoot::make_char_device`] provides the node.
///
/// `Mknod` is the default choice: the node carries exactly the device number we decided on, it
/// does not depend on the host's `/dev` being visible from the mount namespace we are in, and it
/// leaves no mount behind. `BindHost` is for user-namespaced containers where mknod is not
/// possible; the host node's `st_rdev` is checked first (as libnvc does), so a stale or replaced
/// host node is never exposed under the wrong name.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum DeviceSource {
    #[default]
    Mknod,
    BindHost(PathBuf),
}

/// A container root directory; all paths given to its methods are container paths.
#[derive(Debug)]
pub struct ContainerRoot<S: Syscalls = PathrsSyscalls> {
    sys: S,
}

impl ContainerRoot<PathrsSyscalls> {
    /// Open the root once; every later operation resolves relative to this fd. Open it in the
    /// mount namespace the mounts must appear in (inside [`crate::in_mount_namespace_of`] for a
    /// prestart hook).
    /// Where the container's user is not known, gpuhook refuses to write as root through a mount
    /// other than the root filesystem's (see the `owner` module); [`ContainerRoot::open_as`]
    /// acts there with that user's rights instead.
    pub fn open(rootfs: &Path) -> Result<Self> {
        Ok(ContainerRoot {
            sys: PathrsSyscalls::open(rootfs, None)?,
        })
    }

    /// [`ContainerRoot::open`] for a container whose process runs as `uid`:`gid` (its
    /// `process.user`, in-container ids).
    pub fn open_as(rootfs: &Path, uid: u32, gid: u32) -> Result<Self> {
        Ok(ContainerRoot {
            sys: PathrsSyscalls::open(rootfs, Some((uid, gid)))?,
        })
    }

    /// The root directory's O_PATH fd (the ldconfig sandbox pivots into it).
    pub fn root_fd(&self) -> BorrowedFd<'_> {
        self.sys.root_fd()
    }
}

/// Check a container path and normalise it to an absolute path without `.` components.
/// `..` is refused outright: with RESOLVE_IN_ROOT it could not escape, but no legitimate caller
/// needs it and refusing makes hostile input visible in the log.
pub fn normalize_container_path(path: &Path) -> Result<PathBuf> {
    let refuse = |reason: &str| InjectError::Refused {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    };
    if path.as_os_str().is_empty() {
        return Err(refuse("empty path"));
    }
    if path.as_os_str().as_bytes().contains(&0) {
        return Err(refuse("path contains a NUL byte"));
    }
    let mut out = PathBuf::from("/");
    for c in path.components() {
        match c {
            Component::RootDir | Component::CurDir => {}
            Component::ParentDir => {
                return Err(refuse(
                    "path contains '..'; give a path relative to the container root without '..'",
                ))
            }
            Component::Normal(n) => out.push(n),
            Component::Prefix(_) => return Err(refuse("unsupported path prefix")),
        }
    }
    if out == Path::new("/") {
        return Err(refuse("path is the container root itself"));
    }
    Ok(out)
}

impl<S: Syscalls> ContainerRoot<S> {
    /// Use another [`Syscalls`] implementation (tests use a recording fake).
    pub fn with_syscalls(sys: S) -> Self {
        ContainerRoot { sys }
    }

    /// The syscalls implementation.
    pub fn syscalls(&self) -> &S {
        &self.sys
    }

    /// The root's host path (for messages).
    pub fn path(&self) -> &Path {
        self.sys.root_path()
    }

    /// Owner and group of `path` (links followed inside the root).
    pub fn owner(&self, path: &Path) -> Result<(u32, u32)> {
        Ok(self.sys.dir_facts(&normalize_container_path(path)?)?.owner)
    }

    /// The ids to act with in the directory `path` (see the `owner` module): its owner's, or the
    /// container user's on a volume; an error where gpuhook must not write at all.
    pub fn acting_ids(&self, path: &Path) -> Result<(u32, u32)> {
        let path = normalize_container_path(path)?;
        let facts = self.sys.dir_facts(&path)?;
        match decide(facts.owner, facts.mount, self.sys.trust()) {
            Act::AsRoot => Ok(facts.owner),
            Act::As { uid, gid } => Ok((uid, gid)),
            Act::Refuse => Err(InjectError::Refused {
                path,
                reason: REFUSED.to_string(),
            }),
        }
    }

    /// What `path` currently is inside the root (`None` if missing).
    pub fn lstat(&self, path: &Path) -> Result<Option<EntryKind>> {
        self.sys.lstat(&normalize_container_path(path)?)
    }

    fn ensure_parent(&self, path: &Path) -> Result<()> {
        match path.parent() {
            Some(p) if p != Path::new("/") => self.ensure_dir_norm(p, 0o755),
            _ => Ok(()),
        }
    }

    fn ensure_dir_norm(&self, path: &Path, mode: u32) -> Result<()> {
        match self.sys.lstat(path)? {
            // Already a directory (lstat does not follow the last component): nothing to create,
            // and mkdir_all's procfs checks are the costliest part of an injection.
            Some(EntryKind::Directory) => Ok(()),
            None | Some(EntryKind::Symlink(_)) => {
                // mkdir_all follows in-root symlinks and fails if one leads to a non-directory.
                self.sys.mkdir_all(path, mode)
            }
            Some(other) => Err(InjectError::WrongType {
                path: path.to_path_buf(),
                found: other.describe(),
                expected: "a directory",
            }),
        }
    }

    /// Make sure a directory exists at `path` (a mountpoint); parents are created as needed.
    pub fn ensure_dir(&self, path: &Path, mode: u32) -> Result<()> {
        self.ensure_dir_norm(&normalize_container_path(path)?, mode)
    }

    fn ensure_file_norm(&self, path: &Path, mode: u32) -> Result<()> {
        match self.sys.lstat(path)? {
            None => {
                self.ensure_parent(path)?;
                self.sys.create_file(path, mode)
            }
            Some(EntryKind::Directory) => Err(InjectError::WrongType {
                path: path.to_path_buf(),
                found: "a directory",
                expected: "a file (mountpoint for a file)",
            }),
            // An existing non-directory is a fine mountpoint; a symlink is followed *inside* the
            // root when mounting (a dangling one then fails with ENOENT naming the path).
            Some(_) => Ok(()),
        }
    }

    /// Make sure a non-directory exists at `path` (a mountpoint for a file or device).
    pub fn ensure_file(&self, path: &Path, mode: u32) -> Result<()> {
        self.ensure_file_norm(&normalize_container_path(path)?, mode)
    }

    /// Bind-mount the host path `host_src` at `container_dst`, creating the mountpoint inside the
    /// root if needed, with `opts` applied atomically.
    pub fn bind_mount(
        &self,
        host_src: &Path,
        container_dst: &Path,
        opts: MountOptions,
    ) -> Result<()> {
        let dst = normalize_container_path(container_dst)?;
        match self.sys.host_stat(host_src)? {
            None => Err(InjectError::Io {
                op: "bind mount source",
                path: host_src.to_path_buf(),
                error: std::io::Error::from_raw_os_error(libc::ENOENT),
            }),
            Some(EntryKind::Directory) => {
                self.ensure_dir_norm(&dst, 0o755)?;
                self.sys.bind_mount(host_src, &dst, opts)
            }
            Some(_) => {
                self.ensure_file_norm(&dst, 0o644)?;
                self.sys.bind_mount(host_src, &dst, opts)
            }
        }
    }

    /// Create (or verify) the character device `path` with `spec`.
    pub fn make_char_device(
        &self,
        path: &Path,
        spec: CharDeviceSpec,
        source: &DeviceSource,
    ) -> Result<()> {
        let path = normalize_container_path(path)?;
        let same = |k: &EntryKind| {
            matches!(k, EntryKind::CharDevice { major, minor }
                if *major == spec.major && *minor == spec.minor)
        };
        if let DeviceSource::BindHost(host) = source {
            match self.sys.host_stat(host)? {
                Some(k) if same(&k) => {}
                found => {
                    return Err(InjectError::DeviceMismatch {
                        path: host.clone(),
                        found: found.map_or("missing", |k| k.describe()).to_string(),
                        major: spec.major,
                        minor: spec.minor,
                    })
                }
            }
        }
        match self.sys.lstat(&path)? {
            Some(k) if same(&k) => match source {
                DeviceSource::Mknod => self.sys.chmod_chown(&path, spec.mode, spec.uid, spec.gid),
                DeviceSource::BindHost(_) => Ok(()),
            },
            Some(EntryKind::File) if matches!(source, DeviceSource::BindHost(_)) => {
                // An empty mountpoint left by a previous attempt.
                self.bind_device(&path, source)
            }
            Some(other) => Err(InjectError::Refused {
                path,
                reason: format!(
                    "exists as {} that is not char {}:{}; will not replace it",
                    other.describe(),
                    spec.major,
                    spec.minor
                ),
            }),
            None => {
                self.ensure_parent(&path)?;
                match source {
                    DeviceSource::Mknod => self
                        .sys
                        .mknod_char(&path, spec.major, spec.minor, spec.mode, spec.uid, spec.gid),
                    DeviceSource::BindHost(_) => {
                        self.sys.create_file(&path, 0o600)?;
                        self.bind_device(&path, source)
                    }
                }
            }
        }
    }

    fn bind_device(&self, path: &Path, source: &DeviceSource) -> Result<()> {
        match source {
            DeviceSource::BindHost(host) => self.sys.bind_mount(host, path, MountOptions::DEVICE),
            DeviceSource::Mknod => Ok(()),
        }
    }

    /// Create the symlink `link -> target` (CVE-2024-0134): the *link* location is resolved inside
    /// the root, including through symlinked parents planted by the image, so nothing is ever
    /// created on the host. The *target* is stored verbatim: it is interpreted by the container at
    /// use time, against the container's own root, so absolute targets are fine. An identical link
    /// is left alone, another symlink is replaced atomically, anything else is refused.
    pub fn symlink(&self, target: &Path, link: &Path) -> Result<SymlinkOutcome> {
        let link = normalize_container_path(link)?;
        if target.as_os_str().is_empty() || target.as_os_str().as_bytes().contains(&0) {
            return Err(InjectError::Invalid {
                what: "symlink target",
                value: target.display().to_string(),
                reason: "must be non-empty and contain no NUL byte".into(),
            });
        }
        match self.sys.lstat(&link)? {
            None => {
                self.ensure_parent(&link)?;
                self.sys.symlink(target, &link)?;
                Ok(SymlinkOutcome::Created)
            }
            Some(EntryKind::Symlink(existing)) if existing == target => {
                Ok(SymlinkOutcome::Unchanged)
            }
            Some(EntryKind::Symlink(_)) => {
                self.sys.symlink(target, &link)?;
                Ok(SymlinkOutcome::Replaced)
            }
            Some(other) => Err(InjectError::Refused {
                path: link,
                reason: format!(
                    "exists as {}; will not replace it with a symlink",
                    other.describe()
                ),
            }),
        }
    }

    /// Atomically write `contents` to `path` (temp file + rename, so a reader never sees half a
    /// file and a symlink at `path` is replaced, never written through). Returns `false` when the
    /// file already had exactly these contents.
    pub fn write_file(&self, path: &Path, contents: &[u8], mode: u32) -> Result<bool> {
        let path = normalize_container_path(path)?;
        match self.sys.lstat(&path)? {
            Some(EntryKind::Directory) => {
                return Err(InjectError::WrongType {
                    path,
                    found: "a directory",
                    expected: "a regular file",
                })
            }
            Some(EntryKind::File) if self.sys.read_file(&path)? == contents => return Ok(false),
            _ => {}
        }
        self.ensure_parent(&path)?;
        self.sys.write_file(&path, contents, mode)?;
        Ok(true)
    }

    /// Detach the mount at `path` (cleanup and tests).
    pub fn unmount(&self, path: &Path) -> Result<()> {
        self.sys.unmount(&normalize_container_path(path)?)
    }
}
