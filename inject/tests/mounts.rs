//! D10, the rest (issue 22), for real (root): a container whose image links `/etc` into a
//! read-write volume of a **root-owned** host directory gets nothing written there as root. The
//! owner rule (`owner` module) lets root act only in root-owned directories of the container's
//! own root filesystem (and the runtime's `/dev`); on another mount gpuhook acts with the
//! container user's rights (uid 1000 here: a root-owned 0755 directory is not theirs to write),
//! or refuses where that user is unknown.

// A test crate: a failed unwrap is the test failing, with its location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{build_stub_so, in_private_mount_ns, is_root};
use gpuhook_inject::ldcache::{update_ldcache_with, LdcacheOptions};
use gpuhook_inject::{CharDeviceSpec, ContainerRoot, DeviceSource, MountOptions};

const USER: u32 = 1000;

/// A rootfs with a root-owned host directory bind-mounted at /etc (the "volume"), and /dev a
/// tmpfs of its own, as runtimes make it.
fn rootfs_with_etc_volume(base: &Path) -> (PathBuf, PathBuf) {
    let rootfs = base.join("rootfs");
    for d in ["etc", "dev", "usr/lib/x86_64-linux-gnu"] {
        std::fs::create_dir_all(rootfs.join(d)).unwrap();
    }
    let volume = base.join("host-etc");
    std::fs::create_dir_all(volume.join("ld.so.conf.d")).unwrap();
    std::fs::write(volume.join("ld.so.cache"), b"the host's cache").unwrap();
    (rootfs, volume)
}

fn mount(args: &[&str], src: &Path, dst: &Path) {
    let status = Command::new("mount")
        .args(args)
        .arg(src)
        .arg(dst)
        .status()
        .unwrap();
    assert!(status.success());
}

fn files_under(dir: &Path) -> Vec<String> {
    let mut out: Vec<String> = walk(dir)
        .iter()
        .map(|p| p.strip_prefix(dir).unwrap().display().to_string())
        .collect();
    out.sort();
    out
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        }
        out.push(p);
    }
    out
}

#[test]
fn nothing_is_written_as_root_into_a_root_owned_volume() {
    if !is_root("mounts") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().canonicalize().unwrap();
    let (rootfs, volume) = rootfs_with_etc_volume(&base);
    let before = files_under(&volume);
    let icd = Path::new("/etc/OpenCL/vendors/nvidia.icd");
    let host_icd = base.join("nvidia.icd");
    std::fs::write(&host_icd, b"libnvidia-opencl.so.1\n").unwrap();
    in_private_mount_ns(|| {
        mount(&["--bind"], &volume, &rootfs.join("etc"));
        mount(&["-t", "tmpfs"], Path::new("tmpfs"), &rootfs.join("dev"));
        // The container runs as uid 1000: it may not write the root-owned volume, nor may we.
        let root = ContainerRoot::open_as(&rootfs, USER, USER).unwrap();
        let err = root
            .bind_mount(&host_icd, icd, MountOptions::LIBRARY)
            .unwrap_err();
        assert!(err.to_string().contains("Permission denied"), "{err}");
        let err = root
            .write_file(
                Path::new("/etc/ld.so.conf.d/00-gpuhook.conf"),
                b"/x\n",
                0o644,
            )
            .unwrap_err();
        assert!(err.to_string().contains("Permission denied"), "{err}");
        // The runtime's /dev and the image's own tree stay root's.
        let spec = CharDeviceSpec {
            major: 195,
            minor: 0,
            mode: 0o666,
            uid: 0,
            gid: 0,
        };
        root.make_char_device(Path::new("/dev/nvidia0"), spec, &DeviceSource::Mknod)
            .unwrap();
        root.symlink(Path::new("x"), Path::new("/usr/lib/x86_64-linux-gnu/link"))
            .unwrap();
        // The container's user unknown: refused, with the reason.
        let err = ContainerRoot::open(&rootfs)
            .unwrap()
            .ensure_dir(Path::new("/etc/OpenCL"), 0o755)
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("mount other than the container's root"),
            "{err}"
        );
        // A root container could write there itself: gpuhook may, too.
        let as_root = ContainerRoot::open_as(&rootfs, 0, 0).unwrap();
        as_root.ensure_dir(Path::new("/etc/OpenCL"), 0o755).unwrap();
        std::fs::remove_dir(rootfs.join("etc/OpenCL")).unwrap();
    });
    assert_eq!(files_under(&volume), before, "the volume was written");
}

/// ldconfig replaces `/etc/ld.so.cache`: on a root-owned volume it runs with the container user's
/// rights and fails, leaving the host's file alone (NVIDIA's hook would have replaced it as root).
#[test]
fn ldconfig_does_not_replace_a_cache_on_a_root_owned_volume() {
    if !is_root("mounts ldcache") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().canonicalize().unwrap();
    let (rootfs, volume) = rootfs_with_etc_volume(&base);
    build_stub_so(
        &rootfs.join("usr/lib/x86_64-linux-gnu/libcuda.so.570.1"),
        "libcuda.so.1",
    );
    let result = in_private_mount_ns(|| {
        mount(&["--bind"], &volume, &rootfs.join("etc"));
        update_ldcache_with(
            &rootfs,
            &["/usr/lib/x86_64-linux-gnu".into()],
            Path::new("/sbin/ldconfig"),
            LdcacheOptions::new(USER, USER),
        )
    });
    let err = result.unwrap_err().to_string();
    assert!(
        err.contains("Permission denied") || err.contains("ldconfig"),
        "{err}"
    );
    assert_eq!(
        std::fs::read(volume.join("ld.so.cache")).unwrap(),
        b"the host's cache"
    );
    assert!(!volume.join("ld.so.conf.d/00-gpuhook.conf").exists());
}
