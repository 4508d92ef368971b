//! The `Syscalls` trait: the few primitive operations [`crate::ContainerRoot`] needs, expressed on
//! paths *inside* a container root. Keeping them behind a trait lets the decision logic (what to do
//! when something already exists, what to refuse) be unit-tested without root with a recording
//! fake, while the real implementation ([`crate::real::PathrsSyscalls`]) does every lookup with
//! openat2 `RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS` and mounts through file descriptors.

use std::path::Path;

use crate::error::Result;
use crate::owner::Trust;

/// What a path inside the root (or on the host) currently is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryKind {
    Directory,
    File,
    /// A symlink and its target (as stored, not resolved).
    Symlink(std::path::PathBuf),
    CharDevice {
        major: u32,
        minor: u32,
    },
    /// Block device, fifo, socket.
    Other,
}

impl EntryKind {
    /// A short description for error messages.
    pub fn describe(&self) -> &'static str {
        match self {
            EntryKind::Directory => "a directory",
            EntryKind::File => "a regular file",
            EntryKind::Symlink(_) => "a symlink",
            EntryKind::CharDevice { .. } => "a character device",
            EntryKind::Other => "a special file",
        }
    }
}

/// Mount flags applied to a bind mount. A fresh bind mount inherits the source's flags, so these
/// are applied on the detached copy *before* it is attached (mount_setattr), which is atomic: the
/// mount never appears writable in the container, not even for an instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MountOptions {
    pub read_only: bool,
    pub nosuid: bool,
    pub nodev: bool,
    pub noexec: bool,
}

impl MountOptions {
    /// `ro,nosuid,nodev`: what driver libraries and binaries get (libnvc's flags).
    pub const LIBRARY: MountOptions = MountOptions {
        read_only: true,
        nosuid: true,
        nodev: true,
        noexec: false,
    };
    /// `ro,nosuid,noexec` for device nodes bind-mounted from the host (dev must stay allowed).
    pub const DEVICE: MountOptions = MountOptions {
        read_only: true,
        nosuid: true,
        nodev: false,
        noexec: true,
    };
    /// `rw,nosuid,nodev,noexec` for IPC sockets and the MPS pipe directory.
    pub const IPC: MountOptions = MountOptions {
        read_only: false,
        nosuid: true,
        nodev: true,
        noexec: true,
    };
}

/// A directory's owner and group and its mount id (`statx` `STATX_MNT_ID`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirFacts {
    pub owner: (u32, u32),
    pub mount: u64,
}

/// Primitive operations on paths inside a container root. `path` arguments are relative to the
/// root (a leading `/` is allowed and means the root); callers have already refused `..`.
pub trait Syscalls {
    /// The root's host path, for messages.
    fn root_path(&self) -> &Path;
    /// `lstat` of `path` inside the root (symlinks in parent components are followed *within* the
    /// root); `None` when it does not exist.
    fn lstat(&self, path: &Path) -> Result<Option<EntryKind>>;
    /// Owner and mount of the directory `path` (links followed inside the root).
    fn dir_facts(&self, path: &Path) -> Result<DirFacts>;
    /// What the root was opened with: who acts where (see the `owner` module).
    fn trust(&self) -> &Trust;
    /// `stat` of a host path (trusted, follows symlinks); `None` when it does not exist.
    fn host_stat(&self, path: &Path) -> Result<Option<EntryKind>>;
    /// `mkdir -p` inside the root.
    fn mkdir_all(&self, path: &Path, mode: u32) -> Result<()>;
    /// Create an empty regular file (the parent must exist); succeeds if one already exists.
    fn create_file(&self, path: &Path, mode: u32) -> Result<()>;
    /// mknodat a character device (parent must exist, the path must not), then set exact mode and
    /// ownership on the created node.
    fn mknod_char(
        &self,
        path: &Path,
        major: u32,
        minor: u32,
        mode: u32,
        uid: u32,
        gid: u32,
    ) -> Result<()>;
    /// Set mode and ownership of an existing node (no symlink following on the last component).
    fn chmod_chown(&self, path: &Path, mode: u32, uid: u32, gid: u32) -> Result<()>;
    /// Atomically create or replace the *symlink* at `link` (create a temp link, rename over).
    fn symlink(&self, target: &Path, link: &Path) -> Result<()>;
    /// Atomically write a file (temp file + rename, no fsync: container-root files are not worth
    /// an fsync per container start); parent must exist.
    fn write_file(&self, path: &Path, contents: &[u8], mode: u32) -> Result<()>;
    /// Read a regular file inside the root (used for idempotence checks; limited size).
    fn read_file(&self, path: &Path) -> Result<Vec<u8>>;
    /// Bind-mount the host path `host_src` onto `dst` inside the root. `dst` must exist with the
    /// matching type (file vs directory).
    fn bind_mount(&self, host_src: &Path, dst: &Path, opts: MountOptions) -> Result<()>;
    /// Lazily unmount whatever is mounted on `dst` inside the root.
    fn unmount(&self, dst: &Path) -> Result<()>;
}
