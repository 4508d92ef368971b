use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::*;

struct Node {
    _tmp: tempfile::TempDir,
    local_bin: PathBuf,
    usr_bin: PathBuf,
    gpuhook: PathBuf,
}

impl Node {
    fn new() -> Node {
        let tmp = tempfile::tempdir().unwrap();
        let local_bin = tmp.path().join("usr/local/bin");
        let usr_bin = tmp.path().join("usr/bin");
        fs::create_dir_all(&local_bin).unwrap();
        fs::create_dir_all(&usr_bin).unwrap();
        let gpuhook = tmp.path().join("opt/gpuhook");
        Node {
            _tmp: tmp,
            local_bin,
            usr_bin,
            gpuhook,
        }
    }
    fn path_dirs(&self) -> Vec<PathBuf> {
        vec![self.local_bin.clone(), self.usr_bin.clone()]
    }
    fn install(&self, force: bool) -> Outcome {
        install(&self.local_bin, &self.gpuhook, force, &self.path_dirs()).unwrap()
    }
    fn link(&self) -> PathBuf {
        self.local_bin.join(HOOK_NAME)
    }
}

fn nvidia_hook(path: &Path) {
    fs::write(path, b"\x7fELF NVIDIA's hook").unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(0o751)).unwrap();
}

#[test]
fn links_the_hook_and_uninstall_removes_it() {
    let node = Node::new();
    let Outcome::Made(made) = node.install(false) else {
        panic!("no link made")
    };
    assert_eq!(fs::read_link(node.link()).unwrap(), node.gpuhook);
    assert_eq!(made.saved, None);
    assert_eq!(node.install(false), Outcome::AlreadyThere);
    undo(&made).unwrap();
    assert!(fs::symlink_metadata(node.link()).is_err());
    undo(&made).unwrap();
}

/// NVIDIA's own hook in the link's directory is not replaced without --force.
#[test]
fn an_nvidia_hook_in_place_is_kept_without_force() {
    let node = Node::new();
    nvidia_hook(&node.link());
    let Outcome::Skipped(why) = node.install(false) else {
        panic!("replaced NVIDIA's hook without --force")
    };
    assert!(
        why.contains(&node.link().display().to_string()) && why.contains("--force"),
        "{why}"
    );
    assert_eq!(
        fs::read(node.link()).unwrap(),
        b"\x7fELF NVIDIA's hook".to_vec()
    );
}

/// ... nor shadowed: dockerd would find /usr/local/bin's link before /usr/bin's hook.
#[test]
fn an_nvidia_hook_later_on_path_is_not_shadowed_without_force() {
    let node = Node::new();
    nvidia_hook(&node.usr_bin.join(HOOK_NAME));
    let Outcome::Skipped(why) = node.install(false) else {
        panic!("shadowed NVIDIA's hook without --force")
    };
    assert!(why.contains("shadowing"), "{why}");
    assert!(fs::symlink_metadata(node.link()).is_err());
}

/// With --force the previous entry is replaced, and uninstall puts back the very same file:
/// its bytes, mode and inode.
#[test]
fn force_replaces_and_uninstall_restores_byte_for_byte() {
    let node = Node::new();
    nvidia_hook(&node.link());
    let old = fs::metadata(node.link()).unwrap();
    let Outcome::Made(made) = node.install(true) else {
        panic!("--force made no link")
    };
    assert_eq!(fs::read_link(node.link()).unwrap(), node.gpuhook);
    // Resumable: undo twice.
    undo(&made).unwrap();
    undo(&made).unwrap();
    let now = fs::symlink_metadata(node.link()).unwrap();
    assert!(now.is_file());
    assert_eq!((now.ino(), now.mode()), (old.ino(), old.mode()));
    assert_eq!(
        fs::read(node.link()).unwrap(),
        b"\x7fELF NVIDIA's hook".to_vec()
    );
    assert_eq!(
        fs::read_dir(&node.local_bin).unwrap().count(),
        1,
        "no leftovers"
    );
}

/// A link replaced since (a package upgrade) is not ours to remove.
#[test]
fn a_link_replaced_since_is_left_alone() {
    let node = Node::new();
    let Outcome::Made(made) = node.install(false) else {
        panic!("no link made")
    };
    fs::remove_file(node.link()).unwrap();
    nvidia_hook(&node.link());
    undo(&made).unwrap();
    assert_eq!(
        fs::read(node.link()).unwrap(),
        b"\x7fELF NVIDIA's hook".to_vec()
    );
}
