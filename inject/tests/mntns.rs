//! `in_mount_namespace_of`: mounts made inside show up in the target's namespace only.

// A test crate: a failed unwrap is the test failing, with its location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::{Command, Stdio};

use common::{is_root, mounts_under};
use gpuhook_inject::{in_mount_namespace_of, ContainerRoot, MountOptions};

#[test]
fn mounts_land_in_the_target_namespace_not_the_host() {
    if !is_root("mntns") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().canonicalize().unwrap();
    let rootfs = base.join("rootfs");
    std::fs::create_dir_all(&rootfs).unwrap();
    let lib = base.join("libnvidia-ml.so.1");
    std::fs::write(&lib, b"lib").unwrap();
    // A "container": a process in its own (private) mount namespace.
    let mut child = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sleep", "60"])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let pid = i32::try_from(child.id()).expect("a pid fits in i32");
    // Wait until unshare has exec'd sleep (its namespace differs from ours).
    let ours = std::fs::read_link("/proc/self/ns/mnt").unwrap();
    for _ in 0..200 {
        if std::fs::read_link(format!("/proc/{pid}/ns/mnt")).is_ok_and(|n| n != ours) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let result = in_mount_namespace_of(pid, || {
        let root = ContainerRoot::open(&rootfs)?;
        root.bind_mount(
            &lib,
            Path::new("/usr/lib64/libnvidia-ml.so.1"),
            MountOptions::LIBRARY,
        )?;
        // Seen from inside: the mount exists and is read-only.
        let w = std::fs::OpenOptions::new()
            .write(true)
            .open(rootfs.join("usr/lib64/libnvidia-ml.so.1"));
        Ok::<_, gpuhook_inject::InjectError>(w.unwrap_err().raw_os_error())
    })
    .unwrap()
    .unwrap();
    assert_eq!(result, Some(libc::EROFS));
    let in_container = mounts_under(&format!("/proc/{pid}/mountinfo"), &rootfs);
    assert_eq!(
        in_container,
        vec![rootfs.join("usr/lib64/libnvidia-ml.so.1")]
    );
    assert!(
        mounts_under("/proc/self/mountinfo", &base).is_empty(),
        "leaked into host"
    );
    // The mountpoint file was created on the shared filesystem, but the host sees no mount.
    assert_eq!(
        std::fs::read(rootfs.join("usr/lib64/libnvidia-ml.so.1")).unwrap(),
        b""
    );
    // Errors come back: a pid that does not exist.
    let err = in_mount_namespace_of(i32::MAX, || ())
        .unwrap_err()
        .to_string();
    assert!(err.contains("mount namespace of pid"), "{err}");
    child.kill().unwrap();
    child.wait().unwrap();
}
