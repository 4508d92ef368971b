//! The OCI hook file (`gpuhook hook install-oci-hook`) with podman 4.3 and `--hooks-dir`: the
//! way podman and CRI-O (hook mode) run NVIDIA's hook without CDI (`oci-nvidia-hook.json`:
//! stage prestart, `when.always`). On a simulated dgx-h100 (index 1 is `/dev/nvidia3`), a
//! container with `NVIDIA_VISIBLE_DEVICES=1` gets that GPU's node (which opens with ENXIO: the
//! device cgroup allows it), the control and UVM nodes and NVML; one without the variable gets
//! no NVIDIA node and no driver mount.

// Integration tests: a failed unwrap or expect is the test failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod prestart_support;

use std::path::Path;
use std::process::{Command, Output};

const SCRIPT: &str = r#"
for f in /dev/nvidia*; do [ -c "$f" ] && echo "NODE $f $(stat -c '%t:%T' "$f")"; done
for f in /dev/nvidia[0-9]*; do [ -c "$f" ] && echo "OPEN $f $(cat "$f" 2>&1 </dev/null | head -n1)"; done
grep -c 'libnvidia-ml.so' /proc/self/mountinfo | sed 's/^/NVML /'
exit 0
"#;

fn podman(hooks: &Path, rootfs: &Path, env: &[&str]) -> Output {
    let mut cmd = Command::new("podman");
    cmd.arg("--hooks-dir")
        .arg(hooks)
        .args(["run", "--rm", "--runtime", "runc", "--network", "none"])
        .args([
            "--ulimit",
            "nofile=1024:1024",
            "--ulimit",
            "nproc=1024:1024",
        ]);
    for e in env {
        cmd.args(["--env", e]);
    }
    cmd.arg("--rootfs")
        .arg(rootfs)
        .args(["/bin/sh", "-c", SCRIPT])
        .output()
        .expect("spawn podman")
}

fn stdout_of(out: &Output, node: &prestart_support::Node) -> String {
    let (stdout, stderr) = prestart_support::text(out);
    assert!(
        out.status.success(),
        "podman failed: {stderr}\nhook log:\n{}",
        std::fs::read_to_string(&node.log).unwrap_or_default()
    );
    stdout
}

#[test]
fn podman_runs_gpuhook_from_the_oci_hook_file() {
    if !gpuhook_e2e::e2e_ready("docker_oci_hook", &["podman", "runc", "ldconfig"]) {
        return;
    }
    let node = prestart_support::node("dgx-h100", "");
    let tmp = tempfile::Builder::new()
        .prefix("gpuhook-ocihook-")
        .tempdir()
        .unwrap();
    let hooks = tmp.path().join("hooks.d");
    std::fs::create_dir(&hooks).unwrap();
    let install = |code: i32| {
        let out = Command::new(gpuhook_e2e::built("gpuhook"))
            .args(["hook", "install-oci-hook", "--hooks-dir"])
            .arg(&hooks)
            .arg("--gpuhook-path")
            .arg(gpuhook_e2e::built("gpuhook"))
            .arg("--gpuhook-config")
            .arg(&node.config)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(code), "{out:?}");
    };
    install(0);
    install(3);
    let hook: serde_json::Value =
        serde_json::from_slice(&std::fs::read(hooks.join("oci-gpuhook.json")).unwrap()).unwrap();
    assert_eq!(hook["when"]["always"], true);
    assert_eq!(hook["stages"], serde_json::json!(["prestart"]));
    let rootfs = gpuhook_e2e::busybox_rootfs(&tmp.path().join("rootfs"), true);

    let gpu = node.inventory.gpus.iter().find(|g| g.index == 1).unwrap();
    assert_ne!(gpu.minor, 1, "index and minor must differ on this profile");
    let out = podman(&hooks, &rootfs, &["NVIDIA_VISIBLE_DEVICES=1"]);
    let stdout = stdout_of(&out, &node);
    let gpus: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("NODE /dev/nvidia") && l.contains(" c3:") && !l.contains("ctl"))
        .collect();
    let want = format!("NODE /dev/nvidia{} c3:{:x}", gpu.minor, gpu.minor);
    assert_eq!(gpus, [want.as_str()], "{stdout}");
    assert!(stdout.contains("NODE /dev/nvidiactl c3:ff"), "{stdout}");
    assert!(stdout.contains("NODE /dev/nvidia-uvm "), "{stdout}");
    let open = format!("OPEN /dev/nvidia{} cat: can't open", gpu.minor);
    assert!(
        stdout.contains(&open) && stdout.contains("No such device or address"),
        "{stdout}"
    );
    assert!(!stdout.contains("NVML 0"), "NVML is mounted: {stdout}");

    let out = podman(&hooks, &rootfs, &[]);
    let stdout = stdout_of(&out, &node);
    assert!(!stdout.contains("NODE"), "no request, no device: {stdout}");
    assert!(
        stdout.contains("NVML 0"),
        "no request, no driver mount: {stdout}"
    );
}
