//! Security properties of `gpuhook prestart` (lessons of nvidia-runtime-facts §9).
//!
//! Where precision matters the hook is invoked directly with a crafted OCI state whose pid is a
//! "sleeper" in its own private mount namespace and device cgroup: every mount the hook makes is
//! then visible in that process' mountinfo (and nowhere else), and device nodes land in the rootfs
//! directory itself (there is no runc tmpfs on /dev), so "nothing was created outside the rootfs"
//! and "nothing was injected" are checked on the real objects. The rest goes through real runc.

// Integration tests: a failed unwrap or expect is the test failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod prestart_support;

#[path = "prestart_security/symlinks.rs"]
mod symlinks;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use prestart_support::{
    host_mountinfo, invoke_prestart, node, snapshot, text, unique_id, Bundle, Node, Sleeper,
};
use symlinks::{symlink_cases, Canary};

const LIB_DIR: &str = "usr/lib/x86_64-linux-gnu";

fn ready(test: &str) -> bool {
    gpuhook_e2e::e2e_ready(test, &["runc", "ldconfig", "unshare", "gcc"])
}

#[test]
fn library_dir_symlink_to_host_path_stays_in_rootfs() {
    if !ready("prestart_security::library_dir_symlink") {
        return;
    }
    let n = node("dgx-h100", "");
    let lib = format!("libcuda.so.{}", n.inventory.driver_version);
    symlink_cases(&n, LIB_DIR, "lib", &lib);
}

#[test]
fn dev_symlink_to_host_path_stays_in_rootfs() {
    if !ready("prestart_security::dev_symlink") {
        return;
    }
    let n = node("t4", "");
    let minor = n.inventory.gpus[0].minor;
    symlink_cases(&n, "dev", "dev", &format!("nvidia{minor}"));
}

#[test]
fn firmware_dir_symlink_to_host_path_stays_in_rootfs() {
    if !ready("prestart_security::firmware_symlink") {
        return;
    }
    let n = node("dgx-h100", "");
    let fw = n
        .inventory
        .files
        .firmware
        .first()
        .expect("dgx-h100 has GSP firmware");
    let file = format!(
        "nvidia/{}/{}",
        n.inventory.driver_version,
        fw.file_name().unwrap().to_str().unwrap()
    );
    symlink_cases(&n, "lib/firmware", "fw", &file);
}

#[test]
fn library_dir_symlink_through_runc() {
    if !ready("prestart_security::library_dir_symlink_runc") {
        return;
    }
    let n = node("dgx-h100", "");
    let canary = Canary::new("runc-lib");
    let mut b = Bundle::new(
        "ls /usr/lib/x86_64-linux-gnu/ && grep -c libcuda.so.1 /etc/ld.so.cache",
        true,
    );
    std::os::unix::fs::symlink(&canary.dir, b.rootfs.join(LIB_DIR)).unwrap();
    std::fs::create_dir_all(b.rootfs.join(canary.dir.strip_prefix("/").unwrap())).unwrap();
    b.env("NVIDIA_VISIBLE_DEVICES=all").hook(n.hook());
    let host_before = host_mountinfo();
    let (_, out) = b.run("symrunc");
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!("libcuda.so.{}", n.inventory.driver_version)),
        "{stdout}"
    );
    canary.assert_untouched("runc");
    assert_eq!(host_mountinfo(), host_before, "host mount table changed");
}

/// Builds `marker.so`, whose constructor creates `marker` — if it is ever loaded.
fn marker_lib(dir: &Path, marker: &Path) -> PathBuf {
    let src = dir.join("marker.c");
    std::fs::write(
        &src,
        format!(
            "#include <fcntl.h>\n#include <unistd.h>\n__attribute__((constructor)) static void m(void) \
             {{ int fd = open(\"{}\", O_CREAT | O_WRONLY, 0644); if (fd >= 0) close(fd); }}\n",
            marker.display()
        ),
    )
    .unwrap();
    let lib = dir.join("marker.so");
    gpuhook_e2e::run_ok(
        Command::new("gcc")
            .args(["-shared", "-fPIC", "-o"])
            .arg(&lib)
            .arg(&src),
    );
    lib
}

#[test]
fn container_ld_preload_never_reaches_processes_the_hook_starts() {
    if !ready("prestart_security::ld_preload") {
        return;
    }
    let n = node("t4", "");
    let work = tempfile::tempdir().unwrap();
    let marker = work.path().join("marker-written");
    let lib = marker_lib(work.path(), &marker);
    // Positive control: the library does write the marker when preloaded.
    gpuhook_e2e::run_ok(Command::new("/bin/true").env("LD_PRELOAD", &lib));
    assert!(marker.exists(), "the marker library must work");
    std::fs::remove_file(&marker).unwrap();

    let mut b = Bundle::new("echo STARTED", true);
    // The same library at the same path inside the rootfs, for a process chrooted there.
    let in_root = b.rootfs.join(lib.strip_prefix("/").unwrap());
    std::fs::create_dir_all(in_root.parent().unwrap()).unwrap();
    std::fs::copy(&lib, &in_root).unwrap();
    b.env("NVIDIA_VISIBLE_DEVICES=0")
        .env(&format!("LD_PRELOAD={}", lib.display()))
        .env(&format!(
            "LD_LIBRARY_PATH={}",
            lib.parent().unwrap().display()
        ))
        .hook(n.hook());
    let (_, out) = b.run("preload");
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    // ldconfig ran (the container's cache lists the driver) ...
    let cache = std::fs::read(b.rootfs.join("etc/ld.so.cache")).expect("ld.so.cache written");
    assert!(
        cache.windows(17).any(|w| w == b"libnvidia-ml.so.1"),
        "ldconfig did not run"
    );
    // ... and the container's LD_PRELOAD reached none of the processes the hook started.
    assert!(!marker.exists(), "LD_PRELOAD reached a host process");
    let marker_in_root = b.rootfs.join(marker.strip_prefix("/").unwrap());
    assert!(
        !marker_in_root.exists(),
        "LD_PRELOAD reached the sandboxed ldconfig"
    );
}

/// Invokes the hook for hostile env entries; it must fail with `want` and change nothing.
fn hostile(n: &Node, entries: &[String], want: &str) {
    let ctx = format!("{} entries, first {:.60?}", entries.len(), entries.first());
    let mut b = Bundle::new("true", true);
    for e in entries {
        b.env(e);
    }
    b.write();
    let rootfs_before = snapshot(&b.rootfs);
    let sleeper = Sleeper::start("hostile");
    let mounts_before = sleeper.mountinfo();
    let host_before = host_mountinfo();
    let out: Output = invoke_prestart(
        &n.config,
        &unique_id("hostile"),
        sleeper.pid(),
        b.dir.path(),
    );
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success(), "{ctx}: must be refused");
    assert!(stdout.is_empty(), "{ctx}: stdout {stdout}");
    assert!(
        stderr.starts_with("gpuhook: error: ") && stderr.contains(want),
        "{ctx}: want {want:?} in {stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{ctx}: one clear line: {stderr}");
    assert!(
        stderr.len() < 1024,
        "{ctx}: the error must not echo the input: {} bytes",
        stderr.len()
    );
    assert_eq!(
        sleeper.mountinfo(),
        mounts_before,
        "{ctx}: something was mounted"
    );
    assert_eq!(
        snapshot(&b.rootfs),
        rootfs_before,
        "{ctx}: the rootfs changed (nodes, mountpoints)"
    );
    assert_eq!(
        host_mountinfo(),
        host_before,
        "{ctx}: host mount table changed"
    );
}

#[test]
fn hostile_env_values_are_clear_errors_and_inject_nothing() {
    if !ready("prestart_security::hostile_env") {
        return;
    }
    let n = node("dgx-h100", "");
    let s = |v: &str| vec![v.to_string()];
    hostile(
        &n,
        &s("NVIDIA_VISIBLE_DEVICES=../../../etc/passwd"),
        "invalid device id",
    );
    hostile(
        &n,
        &s("NVIDIA_VISIBLE_DEVICES=0,/dev/sda"),
        "invalid device id",
    );
    hostile(
        &n,
        &s("NVIDIA_VISIBLE_DEVICES=0\u{1}1"),
        "invalid device id",
    );
    hostile(
        &n,
        &s("NVIDIA_VISIBLE_DEVICES=0\n1"),
        "NVIDIA_VISIBLE_DEVICES",
    );
    hostile(&n, &s("NVIDIA_VISIBLE_DEVICES=42"), "unknown device \"42\"");
    hostile(
        &n,
        &[
            "NVIDIA_VISIBLE_DEVICES=0".into(),
            "NVIDIA_DRIVER_CAPABILITIES=compute,../../x".into(),
        ],
        "unknown driver capability",
    );
    hostile(
        &n,
        &[
            "NVIDIA_VISIBLE_DEVICES=0".into(),
            "CUDA_MPS_PIPE_DIRECTORY=/tmp/../../etc".into(),
        ],
        "'..'",
    );
    let huge = format!("NVIDIA_VISIBLE_DEVICES={}", "0,".repeat(1 << 19));
    assert!(huge.len() >= 1 << 20);
    hostile(&n, &[huge], "exceeds the limit");
    let mut many: Vec<String> = (0..10_000)
        .map(|i| format!("GPUHOOK_FILLER_{i}=x"))
        .collect();
    many.push("NVIDIA_VISIBLE_DEVICES=0".into());
    hostile(&n, &many, "exceeds the limit of 10000 entries");
}

/// Host mount table before/after `count` GPU containers started one after another and
/// `parallel` at once: compared exactly, nothing ignored.
#[test]
fn many_containers_leave_the_host_mount_table_unchanged() {
    if !ready("prestart_security::many_containers") {
        return;
    }
    let n = node("dgx-h100", "");
    let script = "[ -c /dev/nvidia7 ] && [ -f /usr/lib/x86_64-linux-gnu/libcuda.so.1 ] && echo OK";
    let before = host_mountinfo();
    for i in 0..50 {
        let mut b = Bundle::new(script, true);
        b.env("NVIDIA_VISIBLE_DEVICES=all").hook(n.hook());
        let (_, out) = b.run("seq");
        let (stdout, stderr) = text(&out);
        assert!(
            out.status.success() && stdout.contains("OK"),
            "container {i}: {stdout}\n{stderr}"
        );
    }
    // Bundles are built first: copying busybox while another thread forks can hit ETXTBSY.
    let bundles: Vec<Bundle> = (0..10)
        .map(|_| {
            let mut b = Bundle::new(script, true);
            b.env("NVIDIA_VISIBLE_DEVICES=all").hook(n.hook());
            b
        })
        .collect();
    std::thread::scope(|scope| {
        let handles: Vec<_> = bundles
            .iter()
            .enumerate()
            .map(|(i, b)| {
                scope.spawn(move || {
                    let (_, out) = b.run("par");
                    let (stdout, stderr) = text(&out);
                    assert!(
                        out.status.success() && stdout.contains("OK"),
                        "parallel container {i}: {stdout}\n{stderr}"
                    );
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    });
    let after = host_mountinfo();
    assert_eq!(after, before, "the host mount table changed");
    let injected = n
        .log_lines()
        .iter()
        .filter(|l| l["fields"]["outcome"] == "inject")
        .count();
    assert_eq!(injected, 60, "one inject decision per container");
}

/// A state whose pid lives in the host's mount namespace (a bogus or namespace-less "container")
/// must be refused: every mount would land on the host.
#[test]
fn pid_in_the_host_mount_namespace_is_refused() {
    if !ready("prestart_security::host_mount_namespace") {
        return;
    }
    let n = node("t4", "");
    let mut b = Bundle::new("true", true);
    b.env("NVIDIA_VISIBLE_DEVICES=0");
    b.write();
    let rootfs_before = snapshot(&b.rootfs);
    let mut child = Command::new("sleep").arg("300").spawn().unwrap();
    let host_before = host_mountinfo();
    let out = invoke_prestart(&n.config, &unique_id("hostns"), child.id(), b.dir.path());
    let _ = child.kill();
    let _ = child.wait();
    let (_, stderr) = text(&out);
    assert!(!out.status.success(), "must be refused");
    assert!(
        stderr.contains("shares the hook's own (host) mount namespace"),
        "{stderr}"
    );
    assert_eq!(host_mountinfo(), host_before, "host mount table changed");
    assert_eq!(snapshot(&b.rootfs), rootfs_before, "the rootfs changed");
}
