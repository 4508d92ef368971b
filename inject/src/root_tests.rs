//! Decision-logic tests for [`crate::ContainerRoot`] against the recording fake (no root needed).

use std::path::{Path, PathBuf};

use crate::fake::FakeSyscalls;
use crate::{
    CharDeviceSpec, ContainerRoot, DeviceSource, EntryKind, InjectError, MountOptions,
    SymlinkOutcome,
};

fn spec() -> CharDeviceSpec {
    CharDeviceSpec {
        major: 195,
        minor: 0,
        mode: 0o666,
        uid: 0,
        gid: 0,
    }
}

#[test]
fn hostile_paths_are_refused_before_any_syscall() {
    let root = ContainerRoot::with_syscalls(FakeSyscalls::new());
    for bad in ["../../etc/x", "/usr/../../etc/x", "", "/", "."] {
        let err = root.symlink(Path::new("t"), Path::new(bad)).unwrap_err();
        assert!(matches!(err, InjectError::Refused { .. }), "{bad}: {err}");
        assert!(root.ensure_file(Path::new(bad), 0o644).is_err());
    }
    assert!(root.syscalls().calls().is_empty());
}

#[test]
fn symlink_is_idempotent_replaces_links_and_refuses_files() {
    let fake = FakeSyscalls::new()
        .with(
            "/usr/lib/libcuda.so",
            EntryKind::Symlink("libcuda.so.1".into()),
        )
        .with(
            "/usr/lib/libold.so",
            EntryKind::Symlink("libold.so.9".into()),
        )
        .with("/usr/lib/real.so", EntryKind::File);
    let root = ContainerRoot::with_syscalls(fake);
    let t = |s: &str| PathBuf::from(s);
    assert_eq!(
        root.symlink(&t("libcuda.so.1"), &t("/usr/lib/libcuda.so"))
            .unwrap(),
        SymlinkOutcome::Unchanged
    );
    assert_eq!(
        root.symlink(&t("libold.so.1"), &t("usr/lib/libold.so"))
            .unwrap(),
        SymlinkOutcome::Replaced
    );
    let err = root
        .symlink(&t("x"), &t("/usr/lib/real.so"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("regular file") && err.contains("real.so"),
        "{err}"
    );
    assert_eq!(
        root.symlink(&t("/abs/target"), &t("/new/dir/l")).unwrap(),
        SymlinkOutcome::Created
    );
    assert_eq!(
        root.syscalls().calls(),
        vec![
            "symlink /usr/lib/libold.so -> libold.so.1",
            "mkdir_all /new/dir 755",
            "symlink /new/dir/l -> /abs/target",
        ]
    );
}

#[test]
fn bind_mount_creates_the_right_mountpoint_kind() {
    let fake = FakeSyscalls::new()
        .host("/drv/libcuda.so.1", EntryKind::File)
        .host("/drv/fw", EntryKind::Directory)
        .with("/lib/firmware/nvidia", EntryKind::File);
    let root = ContainerRoot::with_syscalls(fake);
    root.bind_mount(
        Path::new("/drv/libcuda.so.1"),
        Path::new("/usr/lib64/libcuda.so.1"),
        MountOptions::LIBRARY,
    )
    .unwrap();
    let err = root
        .bind_mount(
            Path::new("/drv/fw"),
            Path::new("/lib/firmware/nvidia"),
            MountOptions::LIBRARY,
        )
        .unwrap_err();
    assert!(matches!(err, InjectError::WrongType { .. }), "{err}");
    let missing = root
        .bind_mount(
            Path::new("/drv/nope"),
            Path::new("/x"),
            MountOptions::LIBRARY,
        )
        .unwrap_err()
        .to_string();
    assert!(missing.contains("/drv/nope"), "{missing}");
    assert_eq!(
        root.syscalls().calls(),
        vec![
            "mkdir_all /usr/lib64 755",
            "create_file /usr/lib64/libcuda.so.1 644",
            "bind /drv/libcuda.so.1 -> /usr/lib64/libcuda.so.1 ro=true",
        ]
    );
}

#[test]
fn char_devices_mknod_verify_and_refuse() {
    let fake = FakeSyscalls::new()
        .with(
            "/dev/nvidia0",
            EntryKind::CharDevice {
                major: 195,
                minor: 0,
            },
        )
        .with(
            "/dev/nvidia1",
            EntryKind::CharDevice {
                major: 195,
                minor: 7,
            },
        )
        .host(
            "/host/dev/nvidia0",
            EntryKind::CharDevice {
                major: 195,
                minor: 0,
            },
        )
        .host(
            "/host/dev/stale",
            EntryKind::CharDevice {
                major: 195,
                minor: 9,
            },
        );
    let root = ContainerRoot::with_syscalls(fake);
    root.make_char_device(Path::new("/dev/nvidia0"), spec(), &DeviceSource::Mknod)
        .unwrap();
    let err = root
        .make_char_device(Path::new("/dev/nvidia1"), spec(), &DeviceSource::Mknod)
        .unwrap_err();
    assert!(matches!(err, InjectError::Refused { .. }), "{err}");
    root.make_char_device(
        Path::new("/dev/nvidia-uvm"),
        CharDeviceSpec {
            major: 511,
            ..spec()
        },
        &DeviceSource::Mknod,
    )
    .unwrap();
    let stale = root
        .make_char_device(
            Path::new("/dev/x"),
            spec(),
            &DeviceSource::BindHost("/host/dev/stale".into()),
        )
        .unwrap_err();
    assert!(
        matches!(stale, InjectError::DeviceMismatch { .. }),
        "{stale}"
    );
    root.make_char_device(
        Path::new("/dev/y"),
        spec(),
        &DeviceSource::BindHost("/host/dev/nvidia0".into()),
    )
    .unwrap();
    assert_eq!(
        root.syscalls().calls(),
        vec![
            "chmod_chown /dev/nvidia0 666 0:0",
            "mkdir_all /dev 755",
            "mknod /dev/nvidia-uvm 511:0 666 0:0",
            // /dev is a directory now: nothing more to create.
            "create_file /dev/y 600",
            "bind /host/dev/nvidia0 -> /dev/y ro=true",
        ]
    );
}

#[test]
fn write_file_skips_identical_contents_and_refuses_directories() {
    let fake = FakeSyscalls::new()
        .with("/etc", EntryKind::Directory)
        .with("/etc/d", EntryKind::Directory);
    let root = ContainerRoot::with_syscalls(fake);
    assert!(root
        .write_file(Path::new("/etc/a.conf"), b"x\n", 0o644)
        .unwrap());
    assert!(!root
        .write_file(Path::new("/etc/a.conf"), b"x\n", 0o644)
        .unwrap());
    assert!(root
        .write_file(Path::new("/etc/a.conf"), b"y\n", 0o644)
        .unwrap());
    assert!(root.write_file(Path::new("/etc/d"), b"y\n", 0o644).is_err());
}

#[test]
fn create_symlinks_validates_all_before_creating_any() {
    let root = ContainerRoot::with_syscalls(FakeSyscalls::new());
    let links = vec![
        (PathBuf::from("a"), PathBuf::from("/ok")),
        (PathBuf::from("b"), PathBuf::from("../../etc/evil")),
    ];
    assert!(crate::hooks::create_symlinks_in(&root, &links).is_err());
    assert!(
        root.syscalls().calls().is_empty(),
        "nothing created when one entry is bad"
    );
}

/// D10 (issue 22): the ids gpuhook acts with in `/etc` follow the mount it is on: the image's
/// `/etc` is root's; a root-owned volume there gets the container user's rights, or a refusal
/// naming the path when that user is unknown.
#[test]
fn acting_ids_follow_the_mount_of_the_directory() {
    let root = |on_volume: bool, user: Option<(u32, u32)>| {
        let mut fake = FakeSyscalls::new();
        if on_volume {
            let facts = crate::sys::DirFacts {
                owner: (0, 0),
                mount: 42,
            };
            fake.dirs.insert(PathBuf::from("/etc"), facts);
        }
        fake.trust.user = user;
        ContainerRoot::with_syscalls(fake)
    };
    let etc = Path::new("/etc");
    assert_eq!(root(false, None).acting_ids(etc).unwrap(), (0, 0));
    assert_eq!(
        root(false, Some((1000, 100))).acting_ids(etc).unwrap(),
        (0, 0)
    );
    assert_eq!(
        root(true, Some((1000, 100))).acting_ids(etc).unwrap(),
        (1000, 100)
    );
    assert_eq!(root(true, Some((0, 0))).acting_ids(etc).unwrap(), (0, 0));
    let err = root(true, None).acting_ids(etc).unwrap_err().to_string();
    assert!(
        err.contains("/etc") && err.contains("mount other than the container's root"),
        "{err}"
    );
}
