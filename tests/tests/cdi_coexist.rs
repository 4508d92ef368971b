//! gpuhook's CDI spec beside NVIDIA's, with real podman.
//!
//! The CDI library podman embeds (container-device-interface pkg/cdi/cache.go `refresh`) drops a
//! device that two files of one spec directory define. NVIDIA's refresh unit writes
//! `/var/run/cdi/nvidia.yaml` (kind `nvidia.com/gpu`, names `0`, `GPU-…`, `all`), so gpuhook's
//! spec written beside it would take every GPU away. Here a stand-in for NVIDIA's file (its own
//! kind, a hook that is not gpuhook's) sits in `/var/run/cdi`, and:
//! 1. a spec copied beside it makes podman fail for the shared device, and `gpuhook cdi list`
//!    names both files and says the device is dropped;
//! 2. `gpuhook cdi generate` refuses to write beside it, naming the file and `--force`;
//! 3. `--force` writes gpuhook's spec under NVIDIA's file name: podman resolves the device and
//!    the `setup` hook runs.

// Integration tests: a failed unwrap or expect is the test failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cdi_support;

use std::path::{Path, PathBuf};
use std::process::Command;

use cdi_support::{build_node, gpuhook, gpuhook_ok, podman_run, s, texts, RemoveOnDrop};

const RUN_CDI: &str = "/var/run/cdi";

/// A spec in the shape of NVIDIA's: device `0` and `all`, a hook that is not gpuhook's.
fn nvidia_like(kind: &str, root: &Path, minor: u32) -> String {
    let node = |p: &str| format!("{{path: {p}, hostPath: {}{p}}}", root.display());
    format!(
        "cdiVersion: 0.5.0\nkind: {kind}\ndevices:\n\
         - name: \"0\"\n  containerEdits:\n    deviceNodes: [{gpu}]\n\
         - name: all\n  containerEdits:\n    deviceNodes: [{gpu}]\n\
         containerEdits:\n  deviceNodes: [{ctl}]\n  hooks:\n  - hookName: createContainer\n    \
         path: /bin/true\n    args: [nvidia-cdi-hook, update-ldcache]\n    env: [PATH=/bin]\n",
        gpu = node(&format!("/dev/nvidia{minor}")),
        ctl = node("/dev/nvidiactl"),
    )
}

/// `gpuhook cdi list` over the runtimes' directories.
fn list_specs() -> std::process::Output {
    gpuhook(&[
        "cdi",
        "list",
        "--spec-dir",
        "/etc/cdi",
        "--spec-dir",
        RUN_CDI,
    ])
}

fn ldcache_lists_libcuda(rootfs: &Path) -> bool {
    let cache = rootfs.join("etc/ld.so.cache");
    let out = gpuhook_e2e::run_ok(Command::new("ldconfig").arg("-p").arg("-C").arg(&cache));
    out.lines()
        .any(|l| l.trim_start().starts_with("libcuda.so.1 "))
}

#[test]
fn gpuhook_spec_beside_nvidias_in_one_directory() {
    if !gpuhook_e2e::e2e_ready("cdi_coexist", &["podman", "runc", "ldconfig"]) {
        return;
    }
    let tmp = cdi_support::tmp("coexist");
    let root = tmp.path().join("driver");
    let p = build_node("t4", &root);
    let vendor = format!("gpuhook-coexist-{}.example", std::process::id());
    let kind = format!("{vendor}/gpu");
    let device = format!("{kind}=0");
    std::fs::create_dir_all(RUN_CDI).unwrap();
    let nvidia = PathBuf::from(format!("{RUN_CDI}/{vendor}-nvidia.yaml"));
    let ours = PathBuf::from(format!("{RUN_CDI}/{vendor}-gpu.json"));
    let _guards = (RemoveOnDrop(nvidia.clone()), RemoveOnDrop(ours.clone()));
    let nvidia_text = nvidia_like(&kind, &root, p.gpus[0].minor);
    std::fs::write(&nvidia, &nvidia_text).unwrap();
    let gen = |extra: &[&str]| {
        let mut args = vec![
            "cdi",
            "generate",
            "--driver-root",
            s(&root),
            "--vendor",
            &vendor,
        ];
        args.extend_from_slice(&["--no-inventory-cache", "--output"]);
        args.extend_from_slice(extra);
        gpuhook(&args)
    };

    conflict_is_dropped_and_explained(&tmp, &root, &vendor, &ours, &nvidia);

    // 2. Generation refuses to create that situation, and leaves NVIDIA's file alone.
    let out = gen(&[RUN_CDI]);
    let (_, stderr) = texts(&out);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(s(&nvidia)) && stderr.contains("--force"),
        "{stderr}"
    );
    assert!(!ours.exists());
    assert_eq!(std::fs::read_to_string(&nvidia).unwrap(), nvidia_text);

    // 3. --force: gpuhook's spec under NVIDIA's name; podman uses it and runs our hook.
    let out = gen(&[RUN_CDI, "--force"]);
    let (_, stderr) = texts(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("wrote {}", nvidia.display())),
        "{stderr}"
    );
    assert!(!ours.exists(), "one file per kind in the directory");
    let rootfs = cdi_support::busybox_rootfs(&tmp.path().join("rootfs-ours"));
    let out = podman_run(&device, &rootfs, "echo DONE");
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success() && stdout.contains("DONE"), "{stderr}");
    assert!(
        ldcache_lists_libcuda(&rootfs),
        "gpuhook's setup hook did not run"
    );
    let (stdout, stderr) = texts(&list_specs());
    assert!(stdout.lines().any(|l| l == device), "{stdout}");
    assert!(!stderr.contains(&vendor), "no conflict left: {stderr}");
    // A plain refresh now rewrites that file in place.
    let out = gen(&[RUN_CDI]);
    assert!(out.status.success(), "{}", texts(&out).1);
    assert!(!ours.exists());
}

/// Step 1: gpuhook's spec copied beside NVIDIA's: podman drops the shared device; `gpuhook cdi
/// list` names both files and what to do.
fn conflict_is_dropped_and_explained(
    tmp: &tempfile::TempDir,
    root: &Path,
    vendor: &str,
    ours: &Path,
    nvidia: &Path,
) {
    let device = format!("{vendor}/gpu=0");
    // 1. Two files of one directory: podman drops the shared device; `cdi list` explains it.
    let side = tmp.path().join("side.json");
    gpuhook_ok(&[
        "cdi",
        "generate",
        "--driver-root",
        s(root),
        "--vendor",
        vendor,
        "--no-inventory-cache",
        "--output",
        s(&side),
    ]);
    std::fs::copy(&side, ours).unwrap();
    let rootfs = cdi_support::busybox_rootfs(&tmp.path().join("rootfs-conflict"));
    let out = podman_run(&device, &rootfs, "echo DONE");
    assert!(
        !out.status.success(),
        "podman resolved {device} defined twice in one directory"
    );
    let (stdout, stderr) = texts(&list_specs());
    assert!(!stdout.lines().any(|l| l == device), "{stdout}");
    let line = stderr
        .lines()
        .find(|l| l.contains("conflict:") && l.contains(&device));
    let line = line.unwrap_or_else(|| panic!("no conflict line for {device}:\n{stderr}"));
    for want in [s(nvidia), s(ours), "drop", "--force"] {
        assert!(line.contains(want), "{want}: {line}");
    }
    std::fs::remove_file(ours).unwrap();
}
