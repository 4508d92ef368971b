//! An MPS share applied by a CDI-aware runtime (real podman 4.3): no runtime wrapper and no
//! prestart hook run, only the share's own spec, as gpu-mps-daemon writes it. Its setup hook
//! (`gpuhook hook setup --mps-share NAME::PIPE_DIR`) must refuse a container whose user cannot use
//! the share, with the message the wrapper and the prestart hook give (a CUDA client that cannot
//! use its daemon runs without MPS limits, or waits without a message), and start one that can.
//!
//! gpu-mps-daemon runs on a simulated L20 node with `mpsDaemon.clientUser: 1000`; its spec is
//! copied into `/etc/cdi` (podman 4.3 reads only `/etc/cdi` and `/var/run/cdi`) under a vendor
//! unique to the test, removed on drop.
//! 1. uid 1000 starts; root is refused, naming `mpsDaemon.clientUser`.
//! 2. A directory above the pipe directory uid 1000 cannot search: uid 1000 is refused, the
//!    path named. (A share without a ready daemon is refused by the same check: `mps_users`.)

// Integration tests: a failed unwrap or expect is the test failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cdi_support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use cdi_support::RemoveOnDrop;
use gpuhook_e2e::mps::{write_config, Daemon};
use gpuhook_e2e::{built, busybox_rootfs, e2e_ready, run_ok};
use serde_json::Value;

/// `podman run --user UID:UID --device DEVICE` of the busybox `rootfs`, printing `STARTED`.
fn podman_run(device: &str, rootfs: &Path, uid: u32) -> Output {
    Command::new("podman")
        .args(["run", "--rm", "--runtime", "runc"])
        .args([
            "--ulimit",
            "nofile=1024:1024",
            "--ulimit",
            "nproc=1024:1024",
        ])
        .args(["--network", "none", "--user", &format!("{uid}:{uid}")])
        .args(["--device", device, "--rootfs"])
        .arg(rootfs)
        .args(["/bin/sh", "-c", "echo STARTED"])
        .output()
        .expect("spawn podman")
}

fn text(o: &Output) -> String {
    format!(
        "{}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The daemon's spec under a vendor of this test, in `/etc/cdi`: returns the device to ask for.
fn publish_for_podman(spec: &Path, vendor: &str, dest: &Path) -> String {
    let mut doc: Value = serde_json::from_slice(&std::fs::read(spec).unwrap()).unwrap();
    assert_eq!(doc["kind"], "nvidia.com/gpu-mps");
    doc["kind"] = Value::String(format!("{vendor}/gpu-mps"));
    std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
    std::fs::write(dest, serde_json::to_vec_pretty(&doc).unwrap()).unwrap();
    format!("{vendor}/gpu-mps=0")
}

#[test]
fn podman_applies_the_mps_spec_and_its_hook_refuses_users_who_cannot_use_the_share() {
    if !e2e_ready("mps_podman", &["podman", "runc", "ldconfig"]) {
        return;
    }
    let tmp = tempfile::Builder::new()
        .prefix("gpuhook-mps-podman-")
        .tempdir()
        .unwrap();
    // The share's MPS server runs as the client's user and reaches the pipe directory through
    // the host path: every directory above it must be searchable by that user.
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let node = tmp.path().join("node");
    run_ok(
        Command::new(built("gpuhook-sim"))
            .args(["build", "l20"])
            .arg(&node),
    );
    let (mps, cdi) = (tmp.path().join("mps"), tmp.path().join("cdi"));
    let config = tmp.path().join("mps.yaml");
    write_config(&config, &mps, &node, &cdi, "  clientUser: 1000\n");
    let daemon = Daemon::start(&config, None, &tmp.path().join("daemon.log"));
    let spec = cdi.join("nvidia.com-gpu-mps.json");
    daemon.wait_ready(&mps, &spec, 0, |_| true);
    let hook_args = std::fs::read_to_string(&spec).unwrap();
    assert!(hook_args.contains("--mps-share"), "{hook_args}");

    let vendor = format!("gpuhook-test-mps-{}.example", std::process::id());
    let dest = PathBuf::from(format!("/etc/cdi/{vendor}-gpu-mps.json"));
    let _guard = RemoveOnDrop(dest.clone());
    let device = publish_for_podman(&spec, &vendor, &dest);
    let rootfs = tmp.path().join("rootfs");
    busybox_rootfs(&rootfs, false);

    // 1. The admitted user starts; root is refused by the share's hook, naming the setting.
    let ok = podman_run(&device, &rootfs, 1000);
    assert!(
        ok.status.success() && String::from_utf8_lossy(&ok.stdout).contains("STARTED"),
        "uid 1000 must start: {}\ndaemon log:\n{}",
        text(&ok),
        daemon.log_text()
    );
    let refused = podman_run(&device, &rootfs, 0);
    let err = text(&refused);
    assert!(!refused.status.success(), "root must be refused: {err}");
    assert!(!err.contains("STARTED"), "{err}");
    assert!(
        err.contains("admits only uid 1000") && err.contains("mpsDaemon.clientUser"),
        "{err}"
    );

    // 2. A directory above the pipe directory that uid 1000 cannot search: its MPS server could
    //    not reach the control socket, so CUDA would run without MPS. Refused, naming the path.
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let refused = podman_run(&device, &rootfs, 1000);
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let err = text(&refused);
    assert!(!refused.status.success(), "must be refused: {err}");
    assert!(
        err.contains("uid 1000 cannot search")
            && err.contains(&tmp.path().display().to_string())
            && err.contains("without MPS"),
        "{err}"
    );
    drop(daemon);
}
