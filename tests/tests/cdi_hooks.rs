//! `gpuhook hook setup` (what generated specs run) and the one-step hooks of older specs
//! (`create-symlinks|update-ldcache|disable-device-node-modification`) as a runtime runs them: the OCI state on stdin, the rootfs from `<bundle>/config.json`, nothing on stdout.
//! The spec-driven path (podman running the hooks of a generated spec) is covered by
//! `cdi_podman`; these tests pin the argument handling and the failure modes.

// Integration tests: a failed unwrap or expect is the test failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cdi_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use cdi_support::{build_node, gpuhook, gpuhook_cmd, texts, tmp, write};

/// A bundle dir with `config.json` (`root.path` relative) and a rootfs; returns (bundle, rootfs).
fn bundle(dir: &Path) -> (PathBuf, PathBuf) {
    let bundle = dir.join("bundle");
    let rootfs = bundle.join("rootfs");
    std::fs::create_dir_all(rootfs.join("usr/lib")).unwrap();
    std::fs::create_dir_all(rootfs.join("etc")).unwrap();
    write(
        &bundle.join("config.json"),
        r#"{"ociVersion":"1.0.2","root":{"path":"rootfs"},"process":{"user":{"uid":0,"gid":0}}}"#,
    );
    (bundle, rootfs)
}

/// A bundle whose rootfs holds the t4 node's `libcuda.so.<version>` (real ELF, SONAME
/// `libcuda.so.1`) in the node's library dir; returns the profile, bundle, rootfs and file name.
fn bundle_with_libcuda(dir: &Path) -> (gpuhook_sim::NodeProfile, PathBuf, PathBuf, String) {
    let node = dir.join("driver");
    let p = build_node("t4", &node);
    let (bundle, rootfs) = bundle(dir);
    let lib_dir = p.lib_dir.trim_start_matches('/');
    std::fs::create_dir_all(rootfs.join(lib_dir)).unwrap();
    let lib = format!("libcuda.so.{}", p.driver_version);
    std::fs::copy(
        node.join(lib_dir).join(&lib),
        rootfs.join(lib_dir).join(&lib),
    )
    .unwrap();
    (p, bundle, rootfs, lib)
}

/// The container's ld.so.cache (read by the host's ldconfig) lists `libcuda.so.1`.
fn assert_cache_lists_libcuda(rootfs: &Path) {
    let listing = gpuhook_e2e::run_ok(
        Command::new("ldconfig")
            .arg("-p")
            .arg("-C")
            .arg(rootfs.join("etc/ld.so.cache")),
    );
    assert!(
        listing
            .lines()
            .any(|l| l.trim_start().starts_with("libcuda.so.1 ")),
        "{listing}"
    );
}

fn hook_with_state(args: &[&str], bundle: &Path) -> std::process::Output {
    use std::io::Write;
    let state = format!(
        r#"{{"ociVersion":"1.0.2","id":"cdi-cli","status":"creating","pid":1,"bundle":"{}"}}"#,
        bundle.display()
    );
    let mut child = gpuhook_cmd(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn gpuhook hook");
    // A hook that fails before reading its stdin (a usage error) closes the pipe: not our error.
    match child.stdin.take().unwrap().write_all(state.as_bytes()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        other => other.unwrap(),
    }
    child.wait_with_output().unwrap()
}

#[test]
fn hook_create_symlinks_reads_the_state_and_stays_in_the_root() {
    let t = tmp("symlinks");
    let (bundle, rootfs) = bundle(t.path());
    let outside = t.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    // An image symlink pointing out of the root: must be resolved inside it.
    std::os::unix::fs::symlink(&outside, rootfs.join("usr/lib64")).unwrap();
    let out = hook_with_state(
        &[
            "hook",
            "create-symlinks",
            "--link",
            "libcuda.so.1::/usr/lib/libcuda.so",
            "--link",
            "/usr/lib/libcuda.so.1::/usr/lib64/evil.so",
        ],
        &bundle,
    );
    let (stdout, stderr) = texts(&out);
    assert!(stdout.is_empty(), "hooks never write to stdout: {stdout}");
    assert!(
        std::fs::read_dir(&outside).unwrap().next().is_none(),
        "a link was created outside the container root ({stderr})"
    );
    assert_eq!(
        std::fs::read_link(rootfs.join("usr/lib/libcuda.so")).ok(),
        Some(PathBuf::from("libcuda.so.1")),
        "status {} stderr {stderr}",
        out.status
    );

    // Idempotent.
    let out = hook_with_state(
        &[
            "hook",
            "create-symlinks",
            "--link",
            "libcuda.so.1::/usr/lib/libcuda.so",
        ],
        &bundle,
    );
    assert!(out.status.success(), "{}", texts(&out).1);

    // Not a state on stdin: a clear error.
    let out = gpuhook(&["hook", "create-symlinks", "--link", "a::/b"]);
    let (_, stderr) = texts(&out);
    assert!(!out.status.success());
    assert!(stderr.contains("stdin"), "{stderr}");

    // A bundle without config.json.
    let out = hook_with_state(
        &["hook", "create-symlinks", "--link", "a::/b"],
        &t.path().join("no-bundle"),
    );
    let (_, stderr) = texts(&out);
    assert!(!out.status.success());
    assert!(stderr.contains("config.json"), "{stderr}");
}

#[test]
fn hook_disable_device_node_modification_without_proc_is_a_no_op() {
    let t = tmp("params");
    let (bundle, rootfs) = bundle(t.path());
    let out = hook_with_state(&["hook", "disable-device-node-modification"], &bundle);
    assert!(out.status.success(), "{}", texts(&out).1);
    assert!(!rootfs.join("proc").exists());
}

#[test]
fn hook_update_ldcache_runs_the_host_ldconfig_in_the_root() {
    if !gpuhook_e2e::e2e_ready("cdi_hooks::update_ldcache", &["ldconfig"]) {
        return;
    }
    let t = tmp("ldcache");
    let (p, bundle, rootfs, _) = bundle_with_libcuda(t.path());
    let out = hook_with_state(
        &[
            "hook",
            "update-ldcache",
            "--ldconfig-path",
            "/sbin/ldconfig",
            "--folder",
            &p.lib_dir,
        ],
        &bundle,
    );
    assert!(out.status.success(), "{}", texts(&out).1);
    let conf = std::fs::read_to_string(rootfs.join("etc/ld.so.conf.d/00-gpuhook.conf")).unwrap();
    assert!(conf.lines().any(|l| l == p.lib_dir), "{conf}");
    assert_cache_lists_libcuda(&rootfs);
}

#[test]
fn hook_setup_links_then_updates_the_ldcache_in_one_process() {
    if !gpuhook_e2e::e2e_ready("cdi_hooks::setup", &["ldconfig"]) {
        return;
    }
    let t = tmp("setup");
    let (p, bundle, rootfs, lib) = bundle_with_libcuda(t.path());
    let lib_dir = p.lib_dir.trim_start_matches('/');
    let soname_link = format!("{lib}::{}/libcuda.so.1", p.lib_dir);
    let dev_link = format!("libcuda.so.1::{}/libcuda.so", p.lib_dir);
    let out = hook_with_state(
        &[
            "hook",
            "setup",
            "--link",
            &soname_link,
            "--link",
            &dev_link,
            "--ldconfig-path",
            "/sbin/ldconfig",
            "--folder",
            &p.lib_dir,
            "--disable-device-node-modification",
        ],
        &bundle,
    );
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.is_empty(), "hooks never write to stdout: {stdout}");
    assert_eq!(
        std::fs::read_link(rootfs.join(lib_dir).join("libcuda.so")).ok(),
        Some(PathBuf::from("libcuda.so.1"))
    );
    assert_eq!(
        std::fs::read_link(rootfs.join(lib_dir).join("libcuda.so.1")).ok(),
        Some(PathBuf::from(&lib))
    );
    // No procfs in this root: the params override is a no-op, not an error.
    assert!(!rootfs.join("proc").exists());
    assert_cache_lists_libcuda(&rootfs);

    // A bad link fails before anything is changed, naming the flag's syntax.
    let out = hook_with_state(&["hook", "setup", "--link", "nope"], &bundle);
    assert!(!out.status.success());
    assert!(texts(&out).1.contains("TARGET::LINK"), "{}", texts(&out).1);

    // A missing or dynamic ldconfig fails before the first link is made, naming the binary.
    let new_link = format!("libcuda.so.1::{}/libcuda-new.so", p.lib_dir);
    for (ldconfig, why) in [
        ("/nonexistent/ldconfig", "open host binary"),
        ("/bin/sh", "PT_INTERP"),
    ] {
        let out = hook_with_state(
            &[
                "hook",
                "setup",
                "--link",
                &new_link,
                "--ldconfig-path",
                ldconfig,
                "--folder",
                &p.lib_dir,
            ],
            &bundle,
        );
        let (_, stderr) = texts(&out);
        assert!(!out.status.success(), "{ldconfig}");
        assert!(
            stderr.contains(why) && stderr.contains(ldconfig),
            "{stderr}"
        );
        assert!(
            std::fs::symlink_metadata(rootfs.join(lib_dir).join("libcuda-new.so")).is_err(),
            "{ldconfig}: no link may be made before the check"
        );
    }
}

/// The setup hook's CUDA forward-compat step (NVIDIA's `enable-cuda-compat`,
/// nvidia-container-toolkit v1.20.0 cmd/nvidia-cdi-hook/cudacompat/cudacompat.go): an image
/// whose `/usr/local/cuda/compat` holds one `libcuda.so.<newer major>.*` gets that folder first
/// in its `ld.so.cache`; with a host driver as new, the image is left alone.
#[test]
fn hook_setup_puts_newer_cuda_compat_libraries_first() {
    if !gpuhook_e2e::e2e_ready("cdi_hooks::compat", &["ldconfig"]) {
        return;
    }
    for (host, want_first) in [
        ("570.158.01", "/usr/local/cuda/compat/libcuda.so.1"),
        ("999.1.1", "libcuda.so.1 in the driver folder"),
    ] {
        let t = tmp("compat");
        let (p, bundle, rootfs, lib) = bundle_with_libcuda(t.path());
        let lib_dir = p.lib_dir.trim_start_matches('/');
        let compat = rootfs.join("usr/local/cuda/compat");
        std::fs::create_dir_all(&compat).unwrap();
        std::fs::copy(
            rootfs.join(lib_dir).join(&lib),
            compat.join("libcuda.so.999.1.1"),
        )
        .unwrap();
        std::os::unix::fs::symlink("libcuda.so.999.1.1", compat.join("libcuda.so.1")).unwrap();
        let soname_link = format!("{lib}::{}/libcuda.so.1", p.lib_dir);
        let args = [
            "hook",
            "setup",
            "--link",
            &soname_link,
            "--ldconfig-path",
            "/sbin/ldconfig",
        ];
        let mut args = args.to_vec();
        args.extend([
            "--folder",
            &p.lib_dir,
            "--cuda-compat-host-driver-version",
            host,
        ]);
        let out = hook_with_state(&args, &bundle);
        assert!(out.status.success(), "{}", texts(&out).1);
        let listing = gpuhook_e2e::run_ok(
            Command::new("ldconfig")
                .arg("-p")
                .arg("-C")
                .arg(rootfs.join("etc/ld.so.cache")),
        );
        let first = listing
            .lines()
            .find(|l| l.trim_start().starts_with("libcuda.so.1 "))
            .unwrap_or_else(|| panic!("{listing}"));
        if host.starts_with("570") {
            assert!(
                first.ends_with(want_first),
                "host {host}: {first}\n{listing}"
            );
        } else {
            assert!(
                first.ends_with(&format!("{}/libcuda.so.1", p.lib_dir)),
                "host {host}: {want_first}: {first}"
            );
            assert!(!rootfs
                .join("etc/ld.so.conf.d/00-compat-gpuhook.conf")
                .exists());
        }
    }
}
