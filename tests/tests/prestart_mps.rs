//! `gpuhook prestart` honours the MPS shares `gpu-mps-daemon` publishes.
//!
//! On a simulated L20 node the daemon starts one simulated control daemon per GPU and writes its
//! `nvidia.com/gpu-mps` CDI spec into a temp CDI directory; the hook's config points
//! `cdi-spec-dirs` at it. A busybox container run by plain runc (no CDI support) with the
//! annotation `nvidia.com/gpu-mps=0` gets, from the hook alone: GPU 0's node (opening it gives
//! ENXIO: no driver behind the simulated node, but the device cgroup allows it), the daemon's pipe
//! directory at `/tmp/nvidia-mps` (its `control` socket is there) and the daemon's shared
//! `/dev/shm` (a file written inside appears on the host). An unknown share fails the start with
//! `unresolvable CDI devices` before anything is injected. The env edits cannot be applied by a
//! hook: the log names them.

// Integration tests: a failed unwrap or expect is the test failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod prestart_support;

use gpuhook_e2e::mps::{write_config, Daemon};
use prestart_support::{node, text, Bundle};

const SCRIPT: &str = r#"
[ -c /dev/nvidia0 ] && echo "NODE $(stat -c '%t:%T' /dev/nvidia0)"
echo "OPEN $(cat /dev/nvidia0 2>&1 </dev/null | head -n1)"
for f in /tmp/nvidia-mps/*; do echo "PIPE ${f##*/}"; done
echo from-container > /dev/shm/gpuhook-prestart-mps && echo SHM-WRITTEN
exit 0
"#;

#[test]
fn prestart_injects_the_mps_share_and_refuses_an_unknown_one() {
    if !gpuhook_e2e::e2e_ready("prestart_mps", &["runc"]) {
        return;
    }
    let tmp = tempfile::Builder::new()
        .prefix("gpuhook-prestart-mps-")
        .tempdir()
        .unwrap();
    let (mps, cdi) = (tmp.path().join("mps"), tmp.path().join("cdi"));
    let n = node("l20", &format!("cdi-spec-dirs = [{cdi:?}]"));
    let config = tmp.path().join("mps.yaml");
    write_config(&config, &mps, &n.root, &cdi, "");
    let daemon = Daemon::start(&config, Some(&cdi), &tmp.path().join("daemon.log"));
    let spec_file = cdi.join("nvidia.com-gpu-mps.json");
    let gpu0 = daemon.wait_ready(&mps, &spec_file, 0, |_| true);
    let uuid = gpu0["uuid"].as_str().expect("GPU 0 has a uuid").to_string();
    let host_shm = mps.join(&uuid).join("shm");
    let minor = n.inventory.gpu(0).expect("GPU 0").minor;

    let mut b = Bundle::new(SCRIPT, true);
    b.hook(n.hook());
    b.config["annotations"] = serde_json::json!({ "cdi.k8s.io/mps": "nvidia.com/gpu-mps=0" });
    let (id, out) = b.run("mps");
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "runc run: {stdout}\n{stderr}");
    assert!(
        stdout.lines().any(|l| l == format!("NODE c3:{minor:x}")),
        "{stdout}"
    );
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("OPEN ") && l.contains("No such device or address")),
        "{stdout}"
    );
    assert!(stdout.lines().any(|l| l == "PIPE control"), "{stdout}");
    assert!(stdout.lines().any(|l| l == "SHM-WRITTEN"), "{stdout}");
    assert_eq!(
        std::fs::read_to_string(host_shm.join("gpuhook-prestart-mps")).unwrap(),
        "from-container\n"
    );
    // The env edits are named in the log, not silently dropped.
    let env_line = n
        .decisions(&id)
        .into_iter()
        .find(|l| l["fields"]["outcome"] == "env-not-applied")
        .unwrap_or_else(|| panic!("no env-not-applied decision: {:?}", n.log_lines()));
    let keys = env_line["fields"]["env"].as_str().unwrap();
    assert!(keys.contains("CUDA_MPS_PIPE_DIRECTORY"), "{keys}");
    assert!(keys.contains("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "{keys}");

    let bad = unknown_share_is_refused(&n);

    let pod = pod_annotation_share(&n, &cdi);

    drop(daemon);
    // No mount of the node, the MPS root or a bundle is left on the host.
    let mounts = prestart_support::host_mountinfo();
    for p in [
        tmp.path(),
        n.dir.path(),
        b.dir.path(),
        bad.dir.path(),
        pod.path(),
    ] {
        let p = p.to_str().unwrap();
        assert!(!mounts.contains(p), "mount left under {p}:\n{mounts}");
    }
}

/// An unknown share: the start fails with our message, nothing is injected. Returns the bundle
/// (for the mount check).
fn unknown_share_is_refused(n: &prestart_support::Node) -> Bundle {
    let mut bad = Bundle::new("echo STARTED", true);
    bad.hook(n.hook());
    bad.config["annotations"] =
        serde_json::json!({ "cdi.k8s.io/mps": "nvidia.com/gpu-mps=0-nope" });
    let (_, out) = bad.run("mps-unknown");
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success(), "{stdout}\n{stderr}");
    assert!(!stdout.contains("STARTED"), "{stdout}");
    assert!(
        stderr.contains("unresolvable CDI devices nvidia.com/gpu-mps=0-nope"),
        "{stderr}"
    );
    bad
}

/// Issue #14.5: under containerd's CRI plugin a share named by a *pod* annotation (the pod
/// sandbox's spec has it too: containerd 1.6/1.7 `pkg/cri/server/container_create_linux.go`
/// `containerSpec` copies `pod_annotations` into both) is not a grant: ignored, with a log line,
/// until the admin allow-lists it. Returns the bundle dir (for the mount check).
fn pod_annotation_share(n: &prestart_support::Node, cdi: &std::path::Path) -> tempfile::TempDir {
    let share = serde_json::json!({ "cdi.k8s.io/mps": "nvidia.com/gpu-mps=0" });
    // The pod sandbox's bundle, a sibling of the container's (both in the temp dir).
    let sandbox = tempfile::Builder::new()
        .prefix("gpuhook-sandbox-")
        .tempdir()
        .unwrap();
    let sandbox_id = sandbox
        .path()
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    let mut pod = share.clone();
    pod["io.kubernetes.cri.container-type"] = "sandbox".into();
    std::fs::write(
        sandbox.path().join("config.json"),
        serde_json::json!({ "annotations": pod }).to_string(),
    )
    .unwrap();
    let run = |tag: &str| {
        let mut b = Bundle::new(SCRIPT, true);
        assert_eq!(b.dir.path().parent(), sandbox.path().parent());
        b.hook(n.hook());
        let mut annotations = share.clone();
        annotations["io.kubernetes.cri.container-type"] = "container".into();
        annotations["io.kubernetes.cri.sandbox-id"] = sandbox_id.as_str().into();
        b.config["annotations"] = annotations;
        let (_, out) = b.run(tag);
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "runc run: {stdout}\n{stderr}");
        (b.dir, stdout)
    };
    let (_, stdout) = run("mps-pod");
    assert!(!stdout.contains("NODE "), "{stdout}");
    assert!(!stdout.contains("PIPE control"), "{stdout}");
    let log = std::fs::read_to_string(&n.log).unwrap();
    assert!(
        log.contains("a pod annotation is not a device grant"),
        "{log}"
    );

    // The admin allow-lists MPS shares from pod annotations.
    prestart_support::write_config(
        &n.config,
        &n.root,
        &n.cache,
        &n.log,
        &format!(
            "cdi-spec-dirs = [{cdi:?}]\nallow-cdi-devices-from-pod-annotations = [\"nvidia.com/gpu-mps=*\"]"
        ),
    );
    let (dir, stdout) = run("mps-pod-allowed");
    assert!(stdout.lines().any(|l| l == "PIPE control"), "{stdout}");
    assert!(stdout.contains("NODE "), "{stdout}");
    dir
}
