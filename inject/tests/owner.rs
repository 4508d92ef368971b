//! No confused deputy and non-root containers, for real (root): what gpuhook creates in a
//! directory a container's user owns (a volume bind-mounted into the rootfs) is created as that
//! user, with that user's permissions, and never a device node; ldconfig runs as the owner of the
//! container's `/etc`, so a non-root container gets its cache (see the `owner` and `ldcache`
//! module docs for the rule).

// A test crate: a failed unwrap is the test failing, with its location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{build_stub_so, in_private_mount_ns, is_root};
use gpuhook_inject::ldcache::{update_ldcache_with, LdcacheOptions};
use gpuhook_inject::{CharDeviceSpec, ContainerRoot, DeviceSource, MountOptions};

const USER: u32 = 1000;
const LIBDIR: &str = "usr/lib/x86_64-linux-gnu";

fn chown(path: &Path, uid: u32, gid: u32) {
    std::os::unix::fs::chown(path, Some(uid), Some(gid)).unwrap();
}

fn owner(path: &Path) -> (u32, u32) {
    let md = std::fs::symlink_metadata(path).unwrap();
    (md.uid(), md.gid())
}

/// A rootfs (root-owned, as runtimes make them) and a host "volume" owned by uid 1000.
fn rootfs_and_volume(base: &Path) -> (PathBuf, PathBuf) {
    let rootfs = base.join("rootfs");
    std::fs::create_dir_all(rootfs.join("usr/lib")).unwrap();
    std::fs::create_dir_all(rootfs.join("dev")).unwrap();
    let volume = base.join("volume");
    std::fs::create_dir(&volume).unwrap();
    chown(&volume, USER, USER);
    (rootfs, volume)
}

/// Bind-mounts `volume` at `rootfs/<at>` (in the test thread's private namespace).
fn mount_volume(volume: &Path, rootfs: &Path, at: &str) {
    let dst = rootfs.join(at);
    std::fs::create_dir_all(&dst).unwrap();
    let status = Command::new("mount")
        .arg("--bind")
        .arg(volume)
        .arg(&dst)
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn entries_in_a_volume_the_user_owns_are_created_as_that_user() {
    if !is_root("owner") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().canonicalize().unwrap();
    let (rootfs, volume) = rootfs_and_volume(&base);
    let host_lib = base.join("libcuda.so.570.1");
    std::fs::write(&host_lib, b"lib").unwrap();
    in_private_mount_ns(|| {
        mount_volume(&volume, &rootfs, LIBDIR);
        let root = ContainerRoot::open(&rootfs).unwrap();
        let lib = Path::new("/usr/lib/x86_64-linux-gnu");
        root.bind_mount(
            &host_lib,
            &lib.join("libcuda.so.570.1"),
            MountOptions::LIBRARY,
        )
        .unwrap();
        root.symlink(Path::new("libcuda.so.570.1"), &lib.join("libcuda.so.1"))
            .unwrap();
        root.ensure_dir(&lib.join("vdpau/sub"), 0o755).unwrap();
        root.write_file(&lib.join("nvidia.conf"), b"x\n", 0o644)
            .unwrap();
        // A device node in the user's directory: CAP_MKNOD is not the user's.
        let spec = CharDeviceSpec {
            major: 195,
            minor: 0,
            mode: 0o666,
            uid: 0,
            gid: 0,
        };
        let err = root
            .make_char_device(&lib.join("nvidia0"), spec, &DeviceSource::Mknod)
            .unwrap_err();
        assert!(err.to_string().contains("Operation not permitted"), "{err}");
        // In the image's own (root-owned) tree, the same operations are root's.
        root.make_char_device(Path::new("/dev/nvidia0"), spec, &DeviceSource::Mknod)
            .unwrap();
        root.symlink(Path::new("x"), Path::new("/usr/lib/link"))
            .unwrap();
        root.unmount(&lib.join("libcuda.so.570.1")).unwrap();
    });
    for name in [
        "libcuda.so.570.1",
        "libcuda.so.1",
        "vdpau",
        "vdpau/sub",
        "nvidia.conf",
    ] {
        assert_eq!(owner(&volume.join(name)), (USER, USER), "volume/{name}");
    }
    assert!(
        !volume.join("nvidia0").exists(),
        "no device node in a volume"
    );
    assert_eq!(owner(&rootfs.join("dev/nvidia0")), (0, 0));
    assert_eq!(owner(&rootfs.join("usr/lib/link")), (0, 0));
}

#[test]
fn a_read_only_volume_is_not_written_with_root_privileges() {
    if !is_root("owner read-only") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().canonicalize().unwrap();
    let (rootfs, volume) = rootfs_and_volume(&base);
    std::fs::set_permissions(&volume, std::fs::Permissions::from_mode(0o555)).unwrap();
    in_private_mount_ns(|| {
        mount_volume(&volume, &rootfs, "etc");
        let root = ContainerRoot::open(&rootfs).unwrap();
        let err = root
            .write_file(
                Path::new("/etc/ld.so.conf.d/00-gpuhook.conf"),
                b"/x\n",
                0o644,
            )
            .unwrap_err();
        assert!(err.to_string().contains("Permission denied"), "{err}");
        let err = root
            .symlink(Path::new("t"), Path::new("/etc/link"))
            .unwrap_err();
        assert!(err.to_string().contains("Permission denied"), "{err}");
        // The failed switch was undone: the image's own tree is still written as root.
        root.symlink(Path::new("x"), Path::new("/usr/lib/link"))
            .unwrap();
    });
    assert_eq!(std::fs::read_dir(&volume).unwrap().count(), 0);
    assert_eq!(owner(&rootfs.join("usr/lib/link")), (0, 0));
}

fn cache_lists_libcuda(rootfs: &Path) -> String {
    let out = Command::new("ldconfig")
        .arg("-p")
        .arg("-C")
        .arg(rootfs.join("etc/ld.so.cache"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_non_root_container_gets_its_cache_written_by_the_owner_of_etc() {
    if !is_root("ldcache non-root") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let rootfs = tmp.path().canonicalize().unwrap().join("rootfs");
    let lib = rootfs.join(LIBDIR);
    std::fs::create_dir_all(&lib).unwrap();
    std::fs::create_dir_all(rootfs.join("etc")).unwrap();
    std::fs::set_permissions(rootfs.join("etc"), std::fs::Permissions::from_mode(0o755)).unwrap();
    build_stub_so(&lib.join("libcuda.so.570.1"), "libcuda.so.1");
    let opts = LdcacheOptions::new(USER, USER);
    update_ldcache_with(
        &rootfs,
        &[format!("/{LIBDIR}").into()],
        Path::new("/sbin/ldconfig"),
        opts,
    )
    .unwrap();
    let listing = cache_lists_libcuda(&rootfs);
    assert!(listing.contains("libcuda.so.1 "), "{listing}");
    assert_eq!(owner(&rootfs.join("etc/ld.so.cache")), (0, 0));
    // /etc owned by the container's user: ldconfig runs as that user (the fake reports it).
    chown(&rootfs.join("etc"), USER, USER);
    std::fs::set_permissions(&rootfs, std::fs::Permissions::from_mode(0o777)).unwrap();
    let fake = common::build_fake_ldconfig(tmp.path());
    update_ldcache_with(&rootfs, &[format!("/{LIBDIR}").into()], &fake, opts).unwrap();
    let report = std::fs::read_to_string(rootfs.join("sandbox-report")).unwrap();
    assert!(report.contains("uid=1000\ngid=1000\n"), "{report}");
}
