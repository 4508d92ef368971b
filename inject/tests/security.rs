//! Security tests (run as root, for real): an image that plants symlinks to host paths must never
//! make us create or mount anything outside its rootfs (CVE-2024-0132, CVE-2024-0134,
//! CVE-2025-23359).

// A test crate: a failed unwrap is the test failing, with its location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use common::{in_private_mount_ns, is_root, listing, mknod, mounts_under};
use gpuhook_inject::{CharDeviceSpec, ContainerRoot, DeviceSource, InjectError, MountOptions};

struct Fixture {
    _tmp: tempfile::TempDir,
    rootfs: PathBuf,
    host_target: PathBuf,
    host_lib: PathBuf,
    /// Where the planted symlink points when resolved *inside* the root.
    in_root_target: PathBuf,
}

/// rootfs with `<rel_dir>` a symlink to a host directory (absolute, or relative `../..` that
/// escapes on the host), plus a host directory with a marker and a host "library".
/// With `in_root` the symlink's in-root destination exists (the operation then succeeds there);
/// without, it dangles inside the root (pathrs refuses dangling components: the operation fails).
fn fixture(rel_dir: &str, absolute: bool, in_root: bool) -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().canonicalize().unwrap();
    let rootfs = base.join("rootfs");
    let host_target = base.join("host-target");
    std::fs::create_dir_all(&host_target).unwrap();
    std::fs::write(host_target.join("marker"), b"host").unwrap();
    let link = rootfs.join(rel_dir);
    std::fs::create_dir_all(link.parent().unwrap()).unwrap();
    if absolute {
        symlink(&host_target, &link).unwrap();
    } else {
        let depth = Path::new(rel_dir).components().count();
        let up = "../".repeat(depth);
        symlink(format!("{up}host-target"), &link).unwrap();
        // Sanity: on the host the relative link really escapes the rootfs.
        assert_eq!(link.canonicalize().unwrap(), host_target);
    }
    let host_lib = base.join("libcuda.so.1");
    std::fs::write(&host_lib, b"\x7fELF fake lib").unwrap();
    let in_root_target = if absolute {
        rootfs.join(host_target.strip_prefix("/").unwrap())
    } else {
        rootfs.join("host-target")
    };
    if in_root {
        std::fs::create_dir_all(&in_root_target).unwrap();
    }
    Fixture {
        _tmp: tmp,
        rootfs,
        host_target,
        host_lib,
        in_root_target,
    }
}

fn assert_host_untouched(f: &Fixture) {
    assert_eq!(
        listing(&f.host_target),
        vec!["marker"],
        "host dir was modified"
    );
    assert!(
        mounts_under("/proc/thread-self/mountinfo", &f.host_target).is_empty(),
        "a mount appeared on the host target"
    );
}

fn lib_mount_stays_inside(rel_dir: &str, absolute: bool) {
    let dst = Path::new("/").join(rel_dir).join("libcuda.so.1");
    let dangling = fixture(rel_dir, absolute, false);
    in_private_mount_ns(|| {
        let root = ContainerRoot::open(&dangling.rootfs).unwrap();
        let err = root
            .bind_mount(&dangling.host_lib, &dst, MountOptions::LIBRARY)
            .unwrap_err();
        eprintln!("dangling in-root symlink refused as expected: {err}");
        assert_host_untouched(&dangling);
        assert!(mounts_under("/proc/thread-self/mountinfo", &dangling.rootfs).is_empty());
    });
    let f = fixture(rel_dir, absolute, true);
    in_private_mount_ns(|| {
        let root = ContainerRoot::open(&f.rootfs).unwrap();
        root.bind_mount(&f.host_lib, &dst, MountOptions::LIBRARY)
            .unwrap();
        assert_host_untouched(&f);
        let inside = mounts_under("/proc/thread-self/mountinfo", &f.rootfs);
        assert_eq!(
            inside.len(),
            1,
            "exactly one mount, inside the rootfs: {inside:?}"
        );
        // The file is reachable through the container's view of the path, and is read-only.
        let seen = f.in_root_target.clone();
        assert_eq!(inside[0], seen.join("libcuda.so.1"));
        assert_eq!(
            std::fs::read(seen.join("libcuda.so.1")).unwrap(),
            b"\x7fELF fake lib"
        );
        let w = std::fs::OpenOptions::new()
            .write(true)
            .open(seen.join("libcuda.so.1"));
        assert_eq!(w.unwrap_err().raw_os_error(), Some(libc::EROFS));
        root.unmount(&dst).unwrap();
        assert!(mounts_under("/proc/thread-self/mountinfo", &f.rootfs).is_empty());
    });
}

#[test]
fn bind_mount_through_absolute_symlinked_libdir_stays_in_root() {
    if is_root("bind_mount abs") {
        lib_mount_stays_inside("usr/lib/x86_64-linux-gnu", true);
    }
}

#[test]
fn bind_mount_through_relative_escaping_libdir_stays_in_root() {
    if is_root("bind_mount rel") {
        lib_mount_stays_inside("usr/lib/x86_64-linux-gnu", false);
    }
}

#[test]
fn firmware_dir_symlink_to_host_stays_in_root() {
    if is_root("firmware") {
        lib_mount_stays_inside("lib/firmware", false);
    }
}

#[test]
fn ensure_file_and_dir_never_create_on_host() {
    if !is_root("ensure_file") {
        return;
    }
    for absolute in [true, false] {
        for in_root in [false, true] {
            let f = fixture("usr/lib/x86_64-linux-gnu", absolute, in_root);
            let root = ContainerRoot::open(&f.rootfs).unwrap();
            let file = root.ensure_file(
                Path::new("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"),
                0o644,
            );
            let dir = root.ensure_dir(Path::new("/usr/lib/x86_64-linux-gnu/vdpau/sub"), 0o755);
            assert_eq!(file.is_ok(), in_root, "{file:?}");
            assert_eq!(dir.is_ok(), in_root, "{dir:?}");
            if in_root {
                assert!(f.in_root_target.join("libnvidia-ml.so.1").is_file());
                assert!(f.in_root_target.join("vdpau/sub").is_dir());
            }
            assert_host_untouched(&f);
        }
    }
}

#[test]
fn make_char_device_through_symlinked_dev_stays_in_root() {
    if !is_root("make_char_device") {
        return;
    }
    for absolute in [true, false] {
        let dangling = fixture("dev", absolute, false);
        let spec0 = CharDeviceSpec {
            major: 195,
            minor: 0,
            mode: 0o660,
            uid: 0,
            gid: 44,
        };
        let root = ContainerRoot::open(&dangling.rootfs).unwrap();
        assert!(root
            .make_char_device(Path::new("/dev/nvidia0"), spec0, &DeviceSource::Mknod)
            .is_err());
        assert_host_untouched(&dangling);
        let f = fixture("dev", absolute, true);
        let host_node = f.host_target.parent().unwrap().join("host-nvidia0");
        mknod(&host_node, 195, 0);
        let spec = CharDeviceSpec {
            major: 195,
            minor: 0,
            mode: 0o660,
            uid: 0,
            gid: 44,
        };
        let root = ContainerRoot::open(&f.rootfs).unwrap();
        root.make_char_device(Path::new("/dev/nvidia0"), spec, &DeviceSource::Mknod)
            .unwrap();
        assert_host_untouched(&f);
        // Idempotent second call, and the node is where the container sees /dev.
        root.make_char_device(Path::new("/dev/nvidia0"), spec, &DeviceSource::Mknod)
            .unwrap();
        assert_eq!(
            root.lstat(Path::new("/dev/nvidia0")).unwrap(),
            Some(gpuhook_inject::EntryKind::CharDevice {
                major: 195,
                minor: 0
            })
        );
        in_private_mount_ns(|| {
            let root = ContainerRoot::open(&f.rootfs).unwrap();
            root.make_char_device(
                Path::new("/dev/nvidia1"),
                CharDeviceSpec { minor: 0, ..spec },
                &DeviceSource::BindHost(host_node.clone()),
            )
            .unwrap();
            assert_host_untouched(&f);
            let wrong = root
                .make_char_device(
                    Path::new("/dev/nvidia2"),
                    CharDeviceSpec { minor: 2, ..spec },
                    &DeviceSource::BindHost(host_node.clone()),
                )
                .unwrap_err();
            assert!(
                matches!(wrong, InjectError::DeviceMismatch { .. }),
                "{wrong}"
            );
        });
    }
}

#[test]
fn symlink_creation_through_planted_parent_stays_in_root() {
    if !is_root("symlink") {
        return;
    }
    for absolute in [true, false] {
        let dangling = fixture("usr/lib/x86_64-linux-gnu", absolute, false);
        let root = ContainerRoot::open(&dangling.rootfs).unwrap();
        assert!(root
            .symlink(Path::new("x"), Path::new("/usr/lib/x86_64-linux-gnu/l"))
            .is_err());
        assert_host_untouched(&dangling);
        let f = fixture("usr/lib/x86_64-linux-gnu", absolute, true);
        let root = ContainerRoot::open(&f.rootfs).unwrap();
        // Link *location* through the planted symlink: created inside the root.
        root.symlink(
            Path::new("libcuda.so.1"),
            Path::new("/usr/lib/x86_64-linux-gnu/libcuda.so"),
        )
        .unwrap();
        // An absolute target is fine: it is interpreted in the container at use time.
        root.symlink(
            Path::new("/etc/shadow"),
            Path::new("/usr/lib/x86_64-linux-gnu/abs"),
        )
        .unwrap();
        assert_host_untouched(&f);
        assert_eq!(
            std::fs::read_link(f.in_root_target.join("libcuda.so")).unwrap(),
            Path::new("libcuda.so.1")
        );
        // Replacing the planted directory symlink itself with a link is allowed only because it is
        // a symlink *inside* the root; replacing a real file is refused.
        std::fs::write(f.rootfs.join("usr/lib/regular"), b"x").unwrap();
        let err = root
            .symlink(Path::new("t"), Path::new("/usr/lib/regular"))
            .unwrap_err();
        assert!(matches!(err, InjectError::Refused { .. }), "{err}");
        for hostile in ["../../etc/x", "/../../../../etc/passwd", "usr/../../x"] {
            let err = root
                .symlink(Path::new("t"), Path::new(hostile))
                .unwrap_err();
            assert!(
                matches!(err, InjectError::Refused { .. }),
                "{hostile}: {err}"
            );
        }
        assert_host_untouched(&f);
    }
}

#[test]
fn host_mount_table_unchanged_after_full_inject_unmount_cycle() {
    if !is_root("host cycle") {
        return;
    }
    // Runs in the *host* mount namespace on purpose.
    let f = fixture("usr/lib/x86_64-linux-gnu", true, true);
    let base = f.rootfs.parent().unwrap().to_path_buf();
    let before = mounts_under("/proc/self/mountinfo", &base);
    assert!(before.is_empty());
    let fw = base.join("fw");
    std::fs::create_dir_all(fw.join("570.1")).unwrap();
    std::fs::write(fw.join("570.1/gsp.bin"), b"fw").unwrap();
    let root = ContainerRoot::open(&f.rootfs).unwrap();
    let lib = Path::new("/usr/lib/x86_64-linux-gnu/libcuda.so.1");
    let fwdst = Path::new("/lib/firmware/nvidia");
    root.bind_mount(&f.host_lib, lib, MountOptions::LIBRARY)
        .unwrap();
    root.bind_mount(&fw, fwdst, MountOptions::LIBRARY).unwrap();
    let during = mounts_under("/proc/self/mountinfo", &base);
    assert_eq!(during.len(), 2, "{during:?}");
    assert!(
        during.iter().all(|m| m.starts_with(&f.rootfs)),
        "{during:?}"
    );
    assert_host_untouched_host_ns(&f);
    root.unmount(lib).unwrap();
    root.unmount(fwdst).unwrap();
    assert_eq!(mounts_under("/proc/self/mountinfo", &base), before);
}

fn assert_host_untouched_host_ns(f: &Fixture) {
    assert_eq!(listing(&f.host_target), vec!["marker"]);
    assert!(mounts_under("/proc/self/mountinfo", &f.host_target).is_empty());
}

#[test]
fn mountpoint_that_is_a_symlink_to_a_host_file_is_never_mounted_over() {
    if !is_root("file symlink") {
        return;
    }
    let f = fixture("usr/lib/x86_64-linux-gnu", true, true);
    let host_file = f.host_target.join("marker");
    // The image makes the library's mountpoint itself a symlink to a host file.
    let planted = f.rootfs.join("usr/lib64/libcuda.so.1");
    std::fs::create_dir_all(planted.parent().unwrap()).unwrap();
    symlink(&host_file, &planted).unwrap();
    in_private_mount_ns(|| {
        let root = ContainerRoot::open(&f.rootfs).unwrap();
        let dst = Path::new("/usr/lib64/libcuda.so.1");
        // In the root, the link dangles: refused, nothing mounted anywhere.
        let err = root
            .bind_mount(&f.host_lib, dst, MountOptions::LIBRARY)
            .unwrap_err();
        eprintln!("refused: {err}");
        assert!(mounts_under("/proc/thread-self/mountinfo", &f.rootfs).is_empty());
        assert!(mounts_under("/proc/thread-self/mountinfo", &f.host_target).is_empty());
        // Once the in-root counterpart exists, the mount lands on it — inside the root.
        let in_root = f.rootfs.join(host_file.strip_prefix("/").unwrap());
        std::fs::write(&in_root, b"image file").unwrap();
        root.bind_mount(&f.host_lib, dst, MountOptions::LIBRARY)
            .unwrap();
        assert_eq!(
            mounts_under("/proc/thread-self/mountinfo", &f.rootfs),
            vec![in_root.clone()]
        );
        assert_eq!(std::fs::read(&host_file).unwrap(), b"host");
        assert_host_untouched(&f);
    });
}
