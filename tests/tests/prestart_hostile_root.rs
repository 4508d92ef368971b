//! `gpuhook prestart` against a root the container controls, through real runc:
//! - a tree of symlinks that needs 2^30 traversals to resolve costs one clear ELOOP error, as the
//!   kernel gives (at most 40 links in all, whatever the shape of the link graph); before, the
//!   hook's preflight walk bounded only the nesting depth and never finished (runc's hook timeout
//!   then killed it). The bounded *work* is counted in `gpuhook_inject`'s walk tests;
//! - no confused deputy: a volume (a host directory owned by uid 1000, bind-mounted read-write
//!   where the driver libraries go) gets the hook's mountpoints and links created as uid 1000, not
//!   as root, and the uid-1000 container still works (see `gpuhook_inject`'s `owner` module);
//! - D10 (issue 22): a root-owned host directory bind-mounted read-write as the uid-1000
//!   container's `/etc` gets nothing from the hook (no `ld.so.conf.d/00-gpuhook.conf`, no
//!   replaced `ld.so.cache`): on a mount other than the root filesystem the hook acts with the
//!   container user's rights, who may not write there, so the start fails, naming the file.

// Integration tests: a failed unwrap or expect is the test failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod prestart_support;

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use prestart_support::{node, text, unique_id, Bundle};
use serde_json::json;

const USER: u32 = 1000;

fn ready(test: &str) -> bool {
    gpuhook_e2e::e2e_ready(test, &["runc", "ldconfig"])
}

/// `/usr -> a0`, `a{k} -> a{k+1}/../a{k+1}` for k < `depth`, `a{depth}/lib` a directory: the
/// library directory's parent takes 2^depth link traversals to resolve.
fn plant_link_tree(rootfs: &Path, depth: u32) {
    std::fs::remove_dir_all(rootfs.join("usr")).unwrap();
    std::fs::create_dir_all(rootfs.join(format!("a{depth}/lib"))).unwrap();
    for k in 0..depth {
        let target = format!("a{}/../a{}", k + 1, k + 1);
        std::os::unix::fs::symlink(target, rootfs.join(format!("a{k}"))).unwrap();
    }
    std::os::unix::fs::symlink("a0", rootfs.join("usr")).unwrap();
}

#[test]
fn a_tree_of_links_is_one_eloop_error() {
    if !ready("prestart_hostile_root::link_tree") {
        return;
    }
    let n = node("t4", "");
    let mut b = Bundle::new("echo STARTED", true);
    plant_link_tree(&b.rootfs, 30);
    let mut hook = n.hook();
    // Without the bound the hook would run for ages: runc kills it after this, and the test
    // then fails on the missing ELOOP message.
    hook["timeout"] = json!(60);
    b.env("NVIDIA_VISIBLE_DEVICES=0").hook(hook);
    let (_, out) = b.run("linktree");
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success(), "must fail: {stdout}\n{stderr}");
    assert!(!stdout.contains("STARTED"), "the container must not start");
    let log = std::fs::read_to_string(&n.log).unwrap_or_default();
    let all = format!("{stderr}\n{log}");
    assert!(
        all.contains("too many levels of symlinks")
            && all.contains("Too many levels of symbolic links"),
        "a clear ELOOP error naming the limit:\n{all}"
    );
}

#[test]
fn a_volume_the_user_owns_gets_nothing_created_by_root() {
    if !ready("prestart_hostile_root::volume") {
        return;
    }
    let n = node("t4", "");
    let lib_dir = n.profile.lib_dir.clone();
    let volume = std::env::temp_dir().join(unique_id("volume"));
    std::fs::create_dir(&volume).unwrap();
    std::os::unix::fs::chown(&volume, Some(USER), Some(USER)).unwrap();
    let script = format!(
        "ls {lib_dir}/libcuda.so.1 && echo \"OPEN $(cat /dev/nvidia0 2>&1 </dev/null | head -n1)\""
    );
    let mut b = Bundle::new(&script, true);
    b.config["mounts"].as_array_mut().unwrap().push(json!({
        "destination": lib_dir, "type": "bind", "source": volume, "options": ["rbind", "rw"]
    }));
    b.env("NVIDIA_VISIBLE_DEVICES=0")
        .user(USER, USER)
        .hook(n.hook());
    let (_, out) = b.run("volume");
    let (stdout, stderr) = text(&out);
    let entries: Vec<(String, u32, u32)> = std::fs::read_dir(&volume)
        .unwrap()
        .flatten()
        .map(|e| {
            let md = e.path().symlink_metadata().unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                md.uid(),
                md.gid(),
            )
        })
        .collect();
    let _ = std::fs::remove_dir_all(&volume);
    assert!(out.status.success(), "runc run: {stdout}\n{stderr}");
    assert!(
        stdout.contains("No such device or address"),
        "uid {USER} opens the device (ENXIO): {stdout}"
    );
    assert!(
        entries
            .iter()
            .any(|(name, _, _)| name.starts_with("libcuda.so")),
        "the hook's mountpoints and links are in the volume: {entries:?}"
    );
    for (name, uid, gid) in &entries {
        assert_eq!(
            (*uid, *gid),
            (USER, USER),
            "{name} in the user's volume was not created as the user"
        );
    }
}

#[test]
fn a_root_owned_volume_as_etc_gets_nothing_written_by_root() {
    if !ready("prestart_hostile_root::root_volume") {
        return;
    }
    let n = node("t4", "");
    let volume = std::env::temp_dir().join(unique_id("host-etc"));
    std::fs::create_dir_all(volume.join("ld.so.conf.d")).unwrap();
    std::fs::write(volume.join("ld.so.cache"), b"the host's cache").unwrap();
    let mut b = Bundle::new("echo started", true);
    b.config["mounts"].as_array_mut().unwrap().push(json!({
        "destination": "/etc", "type": "bind", "source": volume, "options": ["rbind", "rw"]
    }));
    b.env("NVIDIA_VISIBLE_DEVICES=0")
        .user(USER, USER)
        .hook(n.hook());
    let (_, out) = b.run("root-volume");
    let (stdout, stderr) = text(&out);
    let mut entries: Vec<String> = std::fs::read_dir(&volume)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    entries.sort();
    let conf_d = std::fs::read_dir(volume.join("ld.so.conf.d"))
        .unwrap()
        .count();
    let cache = std::fs::read(volume.join("ld.so.cache")).unwrap();
    let _ = std::fs::remove_dir_all(&volume);
    assert!(
        !out.status.success() && !stdout.contains("started"),
        "the container started: {stdout}\n{stderr}"
    );
    assert!(
        stderr.contains("/etc/ld.so.conf.d") && stderr.contains("Permission denied"),
        "a clear error naming the file: {stderr}"
    );
    assert_eq!(
        entries,
        ["ld.so.cache", "ld.so.conf.d"],
        "written into the host dir"
    );
    assert_eq!(conf_d, 0, "a drop-in was written into the host dir");
    assert_eq!(cache, b"the host's cache");
}
