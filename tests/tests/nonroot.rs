//! Non-root GPU containers on every path: `gpuhook prestart` under runc, the CDI spec under
//! podman (`--user 1000:1000`), `gpuhook-runtime` under containerd, and the wrapper's early setup
//! driven as containerd's shim drives it.
//!
//! In each, the container's process runs as uid 1000 (`process.user`) and reports its uid and
//! what opening `/dev/nvidia0` gives: ENXIO ("No such device or address": the node is there, the
//! device cgroup allows it and no driver is behind it), not EPERM or EACCES. And the container's
//! `/etc/ld.so.cache`, read on the host with `ldconfig -p -C`, lists `libcuda.so.1`: ldconfig ran
//! although the container's user cannot write `/etc` (it runs as the owner of `/etc`, see
//! `gpuhook_inject::ldcache`). Before that, ldconfig ran as the container's user and every one
//! of these containers failed to start.
//!
//! containerd 1.6's `ctr run` has no `--user`: the test gives it a whole spec (`--config`) with
//! `process.user` set, as the CRI plugin would from a pod's `runAsUser`.

// Integration tests: a failed unwrap or expect is the test failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cdi_support;
mod prestart_support;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use cdi_support::{build_node, busybox_rootfs, gpuhook_ok, s, RemoveOnDrop};
use gpuhook_e2e::containerd::{example_config, Containerd};
use prestart_support::{node, text, unique_id, Bundle};
use serde_json::{json, Value};

const USER: u32 = 1000;
/// What the container reports about itself.
const PROBE: &str = "echo \"UID $(id -u)\"; \
                     echo \"OPEN $(cat /dev/nvidia0 2>&1 </dev/null | head -n1)\"; echo DONE";

/// The probe's output shows uid 1000 opening /dev/nvidia0 up to the missing driver, and the
/// container's cache (on the host) lists libcuda.
fn check(ctx: &str, stdout: &str, rootfs: &Path) {
    assert!(stdout.contains("DONE"), "{ctx}: no probe output:\n{stdout}");
    assert!(
        stdout.lines().any(|l| l == format!("UID {USER}")),
        "{ctx}: the process must run as uid {USER}:\n{stdout}"
    );
    let open = stdout
        .lines()
        .find_map(|l| l.strip_prefix("OPEN "))
        .unwrap_or_default();
    assert!(
        open.contains("No such device or address"),
        "{ctx}: uid {USER} opening /dev/nvidia0 must get ENXIO (allowed, no driver), got {open:?}"
    );
    let cache = rootfs.join("etc/ld.so.cache");
    let listing = gpuhook_e2e::run_ok(Command::new("ldconfig").arg("-p").arg("-C").arg(&cache));
    assert!(
        listing
            .lines()
            .any(|l| l.trim_start().starts_with("libcuda.so.1 ")),
        "{ctx}: {} does not list libcuda.so.1:\n{listing}",
        cache.display()
    );
}

#[test]
fn prestart_under_runc_as_uid_1000() {
    if !gpuhook_e2e::e2e_ready("nonroot::prestart", &["runc", "ldconfig"]) {
        return;
    }
    let n = node("t4", "");
    let mut b = Bundle::new(PROBE, true);
    b.env("NVIDIA_VISIBLE_DEVICES=0")
        .user(USER, USER)
        .hook(n.hook());
    let (_, out) = b.run("nonroot");
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "runc run: {stdout}\n{stderr}");
    check("prestart", &stdout, &b.rootfs);
}

#[test]
fn cdi_spec_under_podman_as_uid_1000() {
    if !gpuhook_e2e::e2e_ready("nonroot::podman", &["podman", "runc", "ldconfig"]) {
        return;
    }
    let tmp = cdi_support::tmp("nonroot-podman");
    let driver = tmp.path().join("driver");
    build_node("t4", &driver);
    let vendor = format!("gpuhook-nonroot-{}.example", std::process::id());
    let spec = PathBuf::from(format!("/etc/cdi/{vendor}-gpu.json"));
    let _remove = RemoveOnDrop(spec.clone());
    gpuhook_ok(&[
        "cdi",
        "generate",
        "--driver-root",
        s(&driver),
        "--vendor",
        &vendor,
        "--output",
        s(&spec),
        "--no-inventory-cache",
    ]);
    let rootfs = busybox_rootfs(&tmp.path().join("rootfs"));
    let out = Command::new("podman")
        .args(["run", "--rm", "--runtime", "runc", "--network", "none"])
        .args([
            "--ulimit",
            "nofile=1024:1024",
            "--ulimit",
            "nproc=1024:1024",
        ])
        .args(["--user", &format!("{USER}:{USER}")])
        .args(["--device", &format!("{vendor}/gpu=0"), "--rootfs"])
        .arg(&rootfs)
        .args(["/bin/sh", "-c", PROBE])
        .output()
        .expect("spawn podman");
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "podman run: {stdout}\n{stderr}");
    check("podman", &stdout, &rootfs);
}

/// A dgx-h100 node in `dir`, its CDI spec in a private spec dir, and a gpuhook config for the
/// wrapper (early setup on, the default); returns the config's path.
fn wrapper_config(dir: &Path) -> PathBuf {
    let driver = dir.join("driver");
    build_node("dgx-h100", &driver);
    let specs = dir.join("cdi");
    let cache = dir.join("inventory.json");
    gpuhook_ok(&[
        "cdi",
        "generate",
        "--driver-root",
        s(&driver),
        "--output",
        s(&specs.join("nvidia.com-gpu.json")),
        "--inventory-cache",
        s(&cache),
    ]);
    let runc = gpuhook_e2e::which("runc").expect("runc");
    let log = dir.join("gpuhook.log");
    let config = dir.join("gpuhook.toml");
    let text = format!(
        "driver-root = {driver:?}\ninventory-cache = {cache:?}\ncdi-spec-dirs = [{specs:?}]\n\
         log-file = {log:?}\n\n[runtime]\nruntimes = [{runc:?}]\n"
    );
    std::fs::write(&config, text).unwrap();
    config
}

/// `runc spec` for a busybox rootfs in `bundle`, running `script` as uid 1000 with every GPU.
fn user_spec(bundle: &Path, script: &str) -> Value {
    busybox_rootfs(&bundle.join("rootfs"));
    gpuhook_e2e::run_ok(Command::new("runc").arg("spec").current_dir(bundle));
    let mut spec: Value =
        serde_json::from_slice(&std::fs::read(bundle.join("config.json")).unwrap()).unwrap();
    spec["process"]["terminal"] = json!(false);
    spec["process"]["args"] = json!(["sh", "-c", script]);
    spec["root"]["readonly"] = json!(false);
    spec["process"]["user"] = json!({"uid": USER, "gid": USER});
    spec["process"]["env"]
        .as_array_mut()
        .unwrap()
        .push(json!("NVIDIA_VISIBLE_DEVICES=all"));
    spec
}

#[test]
fn runtime_under_containerd_as_uid_1000() {
    if !gpuhook_e2e::e2e_ready(
        "nonroot::containerd",
        &["containerd", "ctr", "runc", "ldconfig"],
    ) {
        return;
    }
    let tmp = cdi_support::tmp("nonroot-ctr");
    let dir = tmp.path();
    let config = wrapper_config(dir);
    let wrapper = gpuhook_e2e::built("gpuhook-runtime");
    let cd_config = dir.join("containerd.toml");
    std::fs::write(&cd_config, example_config(dir, &wrapper)).unwrap();
    let daemon = Containerd::start(dir, &cd_config, &[("GPUHOOK_CONFIG", config.into())]);
    let bundle = dir.join("bundle");
    let mut spec = user_spec(&bundle, PROBE);
    let rootfs = bundle.join("rootfs");
    spec["root"] = json!({"path": rootfs, "readonly": false});
    let spec_file = bundle.join("spec.json");
    std::fs::write(&spec_file, spec.to_string()).unwrap();
    let id = unique_id("nonroot-ctr");
    let args: Vec<OsString> = vec![
        "run".into(),
        "--rm".into(),
        "--runc-binary".into(),
        wrapper.into(),
        "--config".into(),
        spec_file.into(),
        id.into(),
    ];
    let out = daemon.ctr(&args);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "ctr run: {stdout}\n{stderr}");
    check("containerd", &stdout, &rootfs);
    drop(daemon);
}

/// `gpuhook-runtime --root STATE ARGS` with `config`; stderr through a file (after `create`, the
/// container's init holds the runtime's stdio until it starts).
fn runtime(config: &Path, state: &Path, args: &[&str]) -> Output {
    let err_path = state.with_extension("stderr");
    let err = std::fs::File::create(&err_path).unwrap();
    let status = Command::new(gpuhook_e2e::built("gpuhook-runtime"))
        .env("GPUHOOK_CONFIG", config)
        .arg("--root")
        .arg(state)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(err)
        .status()
        .expect("gpuhook-runtime");
    let stderr = std::fs::read(&err_path).unwrap();
    assert!(
        status.success(),
        "gpuhook-runtime {args:?}: {}",
        String::from_utf8_lossy(&stderr)
    );
    Output {
        status,
        stdout: Vec::new(),
        stderr,
    }
}

#[test]
fn wrapper_early_setup_as_uid_1000() {
    if !gpuhook_e2e::e2e_ready("nonroot::early_setup", &["runc", "ldconfig"]) {
        return;
    }
    let tmp = cdi_support::tmp("nonroot-early");
    let dir = tmp.path();
    let config = wrapper_config(dir);
    let bundle = dir.join("bundle");
    // The probe writes where uid 1000 may: a sticky world-writable /tmp.
    let spec = user_spec(&bundle, &format!("({PROBE}) > /tmp/probe 2>&1"));
    std::fs::write(bundle.join("config.json"), spec.to_string()).unwrap();
    let rootfs = bundle.join("rootfs");
    std::fs::set_permissions(
        rootfs.join("tmp"),
        std::os::unix::fs::PermissionsExt::from_mode(0o1777),
    )
    .unwrap();
    let state = dir.join("runc-state");
    let id = unique_id("nonroot-early");
    runtime(&config, &state, &["create", "--bundle", s(&bundle), &id]);
    let hooks = std::fs::read_to_string(bundle.join("config.json")).unwrap();
    assert!(
        !hooks.contains("createContainer"),
        "the wrapper did the setup itself: {hooks}"
    );
    runtime(&config, &state, &["start", &id]);
    // A readiness wait for the container's output, not a timing assertion.
    let deadline = Instant::now() + Duration::from_secs(30);
    let probe = rootfs.join("tmp/probe");
    let stdout = loop {
        let text = std::fs::read_to_string(&probe).unwrap_or_default();
        if text.contains("DONE") || Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    runtime(&config, &state, &["delete", "--force", &id]);
    check("early setup", &stdout, &rootfs);
}
