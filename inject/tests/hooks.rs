//! Hook subcommand bodies for real (root): params masking, /dev/char links, create-symlinks.

// A test crate: a failed unwrap is the test failing, with its location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use common::{in_private_mount_ns, is_root, listing, mknod, mounts_under};
use gpuhook_inject::hooks::disable_device_node_modification_in;
use gpuhook_inject::{
    create_dev_char_symlinks, create_symlinks, discover_dev_char_nodes, DevCharNode, SymlinkOutcome,
};

#[test]
fn params_copy_is_mounted_read_only_only_when_present() {
    if !is_root("params") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().canonicalize().unwrap();
    let host_params = base.join("host-params");
    let host_text = "ResmanDebugLevel: 4294967295\nModifyDeviceFiles: 1\nDeviceFileMode: 438\n";
    std::fs::write(&host_params, host_text).unwrap();
    let scratch = base.join("scratch");
    std::fs::create_dir(&scratch).unwrap();
    let rootfs = base.join("rootfs");
    let params = rootfs.join("proc/driver/nvidia/params");
    std::fs::create_dir_all(params.parent().unwrap()).unwrap();
    std::fs::write(&params, "ModifyDeviceFiles: 1\n").unwrap();
    in_private_mount_ns(|| {
        assert!(disable_device_node_modification_in(&rootfs, &host_params, &scratch).unwrap());
        let seen = std::fs::read_to_string(&params).unwrap();
        assert_eq!(
            seen,
            "ResmanDebugLevel: 4294967295\nModifyDeviceFiles: 0\nDeviceFileMode: 438\n"
        );
        let w = std::fs::OpenOptions::new().write(true).open(&params);
        assert!(w.is_err(), "params copy must not be writable");
        assert_eq!(
            mounts_under("/proc/thread-self/mountinfo", &rootfs),
            vec![params.clone()]
        );
        assert!(
            listing(&scratch).is_empty(),
            "scratch copy must be unlinked"
        );
    });
    assert_eq!(std::fs::read_to_string(&host_params).unwrap(), host_text);
    // No /proc/driver/nvidia/params in the container (proc not mounted): nothing happens.
    let bare = base.join("bare");
    std::fs::create_dir_all(&bare).unwrap();
    in_private_mount_ns(|| {
        assert!(!disable_device_node_modification_in(&bare, &host_params, &scratch).unwrap());
        assert!(mounts_under("/proc/thread-self/mountinfo", &bare).is_empty());
        assert!(
            !bare.join("proc").exists(),
            "nothing may be created in the container"
        );
    });
}

#[test]
fn dev_char_links_are_created_idempotently() {
    if !is_root("dev char") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dev = tmp.path().canonicalize().unwrap().join("dev");
    std::fs::create_dir_all(dev.join("nvidia-caps")).unwrap();
    mknod(&dev.join("nvidia0"), 195, 0);
    mknod(&dev.join("nvidiactl"), 195, 255);
    mknod(&dev.join("nvidia-uvm"), 511, 0);
    mknod(&dev.join("nvidia-caps/nvidia-cap1"), 240, 1);
    mknod(&dev.join("null-not-ours"), 1, 3);
    let nodes = discover_dev_char_nodes(&dev).unwrap();
    let paths: Vec<&Path> = nodes.iter().map(|n| n.path.as_path()).collect();
    assert_eq!(
        paths,
        [
            Path::new("nvidia-caps/nvidia-cap1"),
            Path::new("nvidia-uvm"),
            Path::new("nvidia0"),
            Path::new("nvidiactl")
        ]
    );
    let first = create_dev_char_symlinks(&dev, &nodes).unwrap();
    assert!(first.iter().all(|(_, o)| *o == SymlinkOutcome::Created));
    assert_eq!(
        std::fs::read_link(dev.join("char/195:0")).unwrap(),
        Path::new("../nvidia0")
    );
    assert_eq!(
        std::fs::read_link(dev.join("char/240:1")).unwrap(),
        Path::new("../nvidia-caps/nvidia-cap1")
    );
    // The link resolves to the node.
    use std::os::unix::fs::MetadataExt;
    let md = std::fs::metadata(dev.join("char/195:255")).unwrap();
    assert_eq!((libc::major(md.rdev()), libc::minor(md.rdev())), (195, 255));
    let again = create_dev_char_symlinks(&dev, &nodes).unwrap();
    assert!(again.iter().all(|(_, o)| *o == SymlinkOutcome::Unchanged));
    // A stale link (driver reload moved a node) is replaced.
    let moved = [DevCharNode {
        path: "nvidia1".into(),
        major: 195,
        minor: 0,
    }];
    assert_eq!(
        create_dev_char_symlinks(&dev, &moved).unwrap()[0].1,
        SymlinkOutcome::Replaced
    );
}

#[test]
fn dev_char_dir_symlinked_to_host_is_not_written_through() {
    if !is_root("dev char hostile") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().canonicalize().unwrap();
    let dev = base.join("dev");
    let host = base.join("host-dir");
    std::fs::create_dir_all(&dev).unwrap();
    std::fs::create_dir_all(&host).unwrap();
    symlink(&host, dev.join("char")).unwrap();
    let nodes = [DevCharNode {
        path: "nvidia0".into(),
        major: 195,
        minor: 0,
    }];
    let res = create_dev_char_symlinks(&dev, &nodes);
    eprintln!("{res:?}");
    assert!(
        listing(&host).is_empty(),
        "wrote through a symlink out of the dev root"
    );
}

#[test]
fn create_symlinks_hook_in_real_rootfs() {
    if !is_root("create-symlinks") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let rootfs = tmp.path().join("rootfs");
    std::fs::create_dir_all(rootfs.join("usr/lib64")).unwrap();
    let links: Vec<(PathBuf, PathBuf)> = vec![
        ("libcuda.so.1".into(), "/usr/lib64/libcuda.so".into()),
        (
            "libGLX_nvidia.so.570.1".into(),
            "/usr/lib64/libGLX_indirect.so.0".into(),
        ),
    ];
    let out = create_symlinks(&rootfs, &links).unwrap();
    assert_eq!(out, [SymlinkOutcome::Created, SymlinkOutcome::Created]);
    assert_eq!(
        create_symlinks(&rootfs, &links).unwrap(),
        [SymlinkOutcome::Unchanged; 2]
    );
    assert_eq!(
        std::fs::read_link(rootfs.join("usr/lib64/libcuda.so")).unwrap(),
        Path::new("libcuda.so.1")
    );
    let bad = vec![
        ("x".into(), "/usr/lib64/ok".into()),
        ("y".into(), "../../../etc/evil".into()),
    ];
    assert!(create_symlinks(&rootfs, &bad).is_err());
    assert!(
        !rootfs.join("usr/lib64/ok").exists(),
        "validation happens before any creation"
    );
}
