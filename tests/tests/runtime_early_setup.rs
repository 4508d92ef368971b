//! `early-setup` of gpuhook-runtime with real runc: the wrapper does the `gpuhook hook setup`
//! hook's links and ldconfig itself, beside `runc create`, and drops the hook.
//!
//! Driven the way containerd's shim drives the runtime binary (`create --bundle B ID`, then
//! `start`, `delete`), with runc's own state dir per test. Checked: the container's ld.so.cache
//! lists the driver libraries and the SONAME links exist while `config.json` has no setup hook;
//! the mounts ldconfig needed were in a private namespace only (the host's mount table is the
//! same before and after); a setup that fails after runc created the container fails `create`
//! with the reason and deletes the container; `early-setup = false` leaves the hook to runc.

// Integration tests: a failed unwrap or expect is the test failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cdi_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use cdi_support::{build_node, busybox_rootfs, gpuhook_ok, s, tmp};
use serde_json::Value;

struct Rig {
    dir: PathBuf,
    runc_root: PathBuf,
    log: PathBuf,
    _tmp: tempfile::TempDir,
}

impl Rig {
    /// A dgx-h100 node, its CDI spec, and a gpuhook config with `extra` in `[runtime]`.
    fn new(tag: &str, extra: &str) -> Rig {
        let t = tmp(&format!("early-{tag}"));
        let dir = t.path().to_path_buf();
        let root = dir.join("driver");
        build_node("dgx-h100", &root);
        let spec_dir = dir.join("cdi");
        let cache = dir.join("inventory.json");
        gpuhook_ok(&[
            "cdi",
            "generate",
            "--driver-root",
            s(&root),
            "--output",
            s(&spec_dir.join("nvidia.com-gpu.json")),
            "--inventory-cache",
            s(&cache),
        ]);
        let runc = gpuhook_e2e::which("runc").expect("runc");
        let log = dir.join("gpuhook.log");
        std::fs::write(
            dir.join("gpuhook.toml"),
            format!(
                "driver-root = {root:?}\ninventory-cache = {cache:?}\ncdi-spec-dirs = [{spec_dir:?}]\n\
                 log-file = {log:?}\nlog-level = \"debug\"\n\n[runtime]\nruntimes = [{runc:?}]\n{extra}\n"
            ),
        )
        .unwrap();
        Rig {
            runc_root: dir.join("runc-state"),
            dir,
            log,
            _tmp: t,
        }
    }

    /// A bundle asking for every GPU, on a fresh busybox rootfs.
    fn bundle(&self, name: &str) -> PathBuf {
        let bundle = self.dir.join(name);
        let rootfs = busybox_rootfs(&bundle.join("rootfs"));
        assert_eq!(rootfs, bundle.join("rootfs"));
        gpuhook_e2e::run_ok(Command::new("runc").arg("spec").current_dir(&bundle));
        let path = bundle.join("config.json");
        let mut spec: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        spec["process"]["terminal"] = false.into();
        spec["process"]["args"] = serde_json::json!(["sh", "-c", "true"]);
        spec["process"]["env"]
            .as_array_mut()
            .unwrap()
            .push("NVIDIA_VISIBLE_DEVICES=all".into());
        std::fs::write(&path, spec.to_string()).unwrap();
        bundle
    }

    /// `gpuhook-runtime --root <state> ARGS` with this rig's config. stderr goes through a file:
    /// after `create` the container's init holds the runtime's stdio until it is started, so a
    /// pipe would never reach EOF.
    fn runtime(&self, args: &[&str]) -> Output {
        let err_path = self.dir.join("runtime.stderr");
        let err_file = std::fs::File::create(&err_path).unwrap();
        let status = Command::new(gpuhook_e2e::built("gpuhook-runtime"))
            .env("GPUHOOK_CONFIG", self.dir.join("gpuhook.toml"))
            .arg("--root")
            .arg(&self.runc_root)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err_file)
            .status()
            .expect("gpuhook-runtime");
        Output {
            status,
            stdout: Vec::new(),
            stderr: std::fs::read(&err_path).unwrap(),
        }
    }

    fn runc_ids(&self) -> Vec<String> {
        let out = gpuhook_e2e::run_ok(
            Command::new("runc")
                .arg("--root")
                .arg(&self.runc_root)
                .args(["list", "-q"]),
        );
        out.lines().map(str::to_string).collect()
    }
}

fn mountinfo() -> usize {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .count()
}

fn ldcache_lists(rootfs: &Path, soname: &str) -> bool {
    let cache = rootfs.join("etc/ld.so.cache");
    cache.exists()
        && gpuhook_e2e::run_ok(Command::new("ldconfig").arg("-p").arg("-C").arg(&cache))
            .lines()
            .any(|l| l.trim_start().starts_with(&format!("{soname} ")))
}

fn setup_hooks(bundle: &Path) -> Vec<Value> {
    let spec: Value =
        serde_json::from_slice(&std::fs::read(bundle.join("config.json")).unwrap()).unwrap();
    spec.pointer("/hooks/createContainer")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_wrapper_does_the_setup_hook_beside_runc() {
    if !gpuhook_e2e::e2e_ready("runtime_early_setup::beside_runc", &["runc", "ldconfig"]) {
        return;
    }
    let rig = Rig::new("on", "");
    let bundle = rig.bundle("b1");
    let before = mountinfo();
    let id = format!("gpuhook-early-{}", std::process::id());
    let create = rig.runtime(&["create", "--bundle", s(&bundle), &id]);
    ok(&create, "create");
    assert!(
        setup_hooks(&bundle).is_empty(),
        "the hook must be gone: {:?}",
        setup_hooks(&bundle)
    );
    let rootfs = bundle.join("rootfs");
    assert!(ldcache_lists(&rootfs, "libcuda.so.1"));
    assert!(ldcache_lists(&rootfs, "libnvidia-ml.so.1"));
    let link = std::fs::read_link(rootfs.join("usr/lib/x86_64-linux-gnu/libcuda.so")).unwrap();
    assert_eq!(link, Path::new("/usr/lib/x86_64-linux-gnu/libcuda.so.1"));
    // ldconfig's view of the libraries was private: nothing stays mounted on the host.
    assert_eq!(mountinfo(), before, "a mount leaked onto the host");
    ok(&rig.runtime(&["start", &id]), "start");
    ok(&rig.runtime(&["delete", "--force", &id]), "delete");
    let log = std::fs::read_to_string(&rig.log).unwrap();
    assert!(log.contains("hook setup done by the wrapper"), "{log}");
}

#[test]
fn a_failed_setup_fails_create_and_deletes_the_container() {
    if !gpuhook_e2e::e2e_ready("runtime_early_setup::failure", &["runc", "ldconfig"]) {
        return;
    }
    let rig = Rig::new("fail", "");
    // A dynamic "ldconfig": refused once the setup runs, after runc has created the container.
    let config = rig.dir.join("gpuhook.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, format!("ldconfig = \"@/bin/sh\"\n{text}")).unwrap();
    let bundle = rig.bundle("b2");
    let before = mountinfo();
    let id = format!("gpuhook-early-fail-{}", std::process::id());
    let create = rig.runtime(&["create", "--bundle", s(&bundle), &id]);
    let stderr = String::from_utf8_lossy(&create.stderr);
    assert!(!create.status.success(), "create must fail: {stderr}");
    assert!(
        stderr.contains("container setup failed") && stderr.contains("/bin/sh"),
        "{stderr}"
    );
    assert!(stderr.contains("the container was deleted"), "{stderr}");
    assert!(!rig.runc_ids().contains(&id), "{:?}", rig.runc_ids());
    assert_eq!(mountinfo(), before, "a mount leaked onto the host");
}

#[test]
fn without_early_setup_runc_runs_the_hook() {
    if !gpuhook_e2e::e2e_ready("runtime_early_setup::off", &["runc", "ldconfig"]) {
        return;
    }
    let rig = Rig::new("off", "early-setup = false");
    let bundle = rig.bundle("b3");
    let id = format!("gpuhook-early-off-{}", std::process::id());
    ok(
        &rig.runtime(&["create", "--bundle", s(&bundle), &id]),
        "create",
    );
    let hooks = setup_hooks(&bundle);
    assert_eq!(hooks.len(), 1, "{hooks:?}");
    assert_eq!(hooks[0]["args"][2], "setup");
    assert!(ldcache_lists(&bundle.join("rootfs"), "libcuda.so.1"));
    ok(&rig.runtime(&["delete", "--force", &id]), "delete");
    let log = std::fs::read_to_string(&rig.log).unwrap();
    assert!(!log.contains("hook setup done by the wrapper"), "{log}");
}
