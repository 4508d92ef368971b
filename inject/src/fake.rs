//! A recording in-memory [`Syscalls`] for unit tests of [`crate::ContainerRoot`]'s decisions.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::error::Result;
use crate::owner::Trust;
use crate::sys::{DirFacts, EntryKind, MountOptions, Syscalls};

#[derive(Debug, Default)]
pub(crate) struct FakeSyscalls {
    pub root: PathBuf,
    pub tree: RefCell<BTreeMap<PathBuf, EntryKind>>,
    pub files: RefCell<BTreeMap<PathBuf, Vec<u8>>>,
    pub host: BTreeMap<PathBuf, EntryKind>,
    pub calls: RefCell<Vec<String>>,
    /// How many lookups ([`Syscalls::lstat`]) were made: the work a walk did.
    pub lstats: Cell<usize>,
    /// Owner and mount id of directories (default: root-owned, on mount 1, the root's).
    pub dirs: BTreeMap<PathBuf, DirFacts>,
    pub trust: Trust,
}

impl FakeSyscalls {
    pub fn new() -> Self {
        FakeSyscalls {
            root: PathBuf::from("/fake-root"),
            trust: Trust {
                root_owner: 0,
                own_mounts: vec![1],
                user: None,
            },
            ..Default::default()
        }
    }
    pub fn with(self, path: &str, kind: EntryKind) -> Self {
        self.tree.borrow_mut().insert(path.into(), kind);
        self
    }
    pub fn host(mut self, path: &str, kind: EntryKind) -> Self {
        self.host.insert(path.into(), kind);
        self
    }
    fn log(&self, s: String) {
        self.calls.borrow_mut().push(s);
    }
    pub fn calls(&self) -> Vec<String> {
        self.calls.borrow().clone()
    }
    pub fn lstat_count(&self) -> usize {
        self.lstats.get()
    }
}

impl Syscalls for FakeSyscalls {
    fn root_path(&self) -> &Path {
        &self.root
    }
    fn lstat(&self, path: &Path) -> Result<Option<EntryKind>> {
        self.lstats.set(self.lstats.get() + 1);
        Ok(self.tree.borrow().get(path).cloned())
    }
    fn dir_facts(&self, path: &Path) -> Result<DirFacts> {
        Ok(self.dirs.get(path).copied().unwrap_or(DirFacts {
            owner: (0, 0),
            mount: 1,
        }))
    }
    fn trust(&self) -> &Trust {
        &self.trust
    }
    fn host_stat(&self, path: &Path) -> Result<Option<EntryKind>> {
        Ok(self.host.get(path).cloned())
    }
    fn mkdir_all(&self, path: &Path, mode: u32) -> Result<()> {
        self.log(format!("mkdir_all {} {mode:o}", path.display()));
        let mut t = self.tree.borrow_mut();
        for a in path.ancestors().filter(|a| *a != Path::new("/")) {
            t.entry(a.to_path_buf()).or_insert(EntryKind::Directory);
        }
        Ok(())
    }
    fn create_file(&self, path: &Path, mode: u32) -> Result<()> {
        self.log(format!("create_file {} {mode:o}", path.display()));
        self.tree
            .borrow_mut()
            .entry(path.into())
            .or_insert(EntryKind::File);
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
        self.log(format!(
            "mknod {} {major}:{minor} {mode:o} {uid}:{gid}",
            path.display()
        ));
        self.tree
            .borrow_mut()
            .insert(path.into(), EntryKind::CharDevice { major, minor });
        Ok(())
    }
    fn chmod_chown(&self, path: &Path, mode: u32, uid: u32, gid: u32) -> Result<()> {
        self.log(format!(
            "chmod_chown {} {mode:o} {uid}:{gid}",
            path.display()
        ));
        Ok(())
    }
    fn symlink(&self, target: &Path, link: &Path) -> Result<()> {
        self.log(format!(
            "symlink {} -> {}",
            link.display(),
            target.display()
        ));
        self.tree
            .borrow_mut()
            .insert(link.into(), EntryKind::Symlink(target.into()));
        Ok(())
    }
    fn write_file(&self, path: &Path, contents: &[u8], mode: u32) -> Result<()> {
        self.log(format!("write_file {} {mode:o}", path.display()));
        self.tree.borrow_mut().insert(path.into(), EntryKind::File);
        self.files
            .borrow_mut()
            .insert(path.into(), contents.to_vec());
        Ok(())
    }
    fn read_file(&self, path: &Path) -> Result<Vec<u8>> {
        Ok(self.files.borrow().get(path).cloned().unwrap_or_default())
    }
    fn bind_mount(&self, host_src: &Path, dst: &Path, opts: MountOptions) -> Result<()> {
        self.log(format!(
            "bind {} -> {} ro={}",
            host_src.display(),
            dst.display(),
            opts.read_only
        ));
        Ok(())
    }
    fn unmount(&self, dst: &Path) -> Result<()> {
        self.log(format!("umount {}", dst.display()));
        Ok(())
    }
}
