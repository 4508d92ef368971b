//! The node's config chosen by its `nvidia.com/device-plugin.config` label (read from a file),
//! switched without a restart; an invalid config keeps the last good one; `labels` writes the
//! GFD labels as an NFD feature file.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test crate: a panic is a test failure

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::node::{node_files, serve, terminate, BIN};
use common::{next_list, FakeKubelet, WAIT};
use gpuhook_device_plugin::api;

/// A ConfigMap-like directory: `l20` (8 replicas) and `t4` (3 replicas, renameByDefault).
fn config_dir(dir: &Path) -> std::path::PathBuf {
    let cfgs = dir.join("configs");
    std::fs::create_dir(&cfgs).unwrap();
    let ts = |replicas: u32, rename: bool| {
        format!(
            "version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: {rename}\n    resources:\n    - name: nvidia.com/gpu\n      replicas: {replicas}\n"
        )
    };
    std::fs::write(cfgs.join("l20"), ts(8, false)).unwrap();
    std::fs::write(cfgs.join("t4"), ts(3, true)).unwrap();
    cfgs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_label_selects_the_config_and_a_change_applies_without_restart() {
    let files = tempfile::tempdir().unwrap();
    let (_, inv) = node_files(files.path());
    let cfgs = config_dir(files.path());
    let label = files.path().join("label");
    std::fs::write(&label, "l20\n").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut kubelet = FakeKubelet::start(dir.path());
    let plugin = serve(
        &cfgs,
        &inv,
        dir.path(),
        &["--node-label-file".as_ref(), label.as_os_str()],
    );
    let mut reg = kubelet.next_registration().await;
    assert_eq!(reg.request.resource_name, "nvidia.com/gpu");
    assert_eq!(
        next_list(&mut reg, WAIT).await.devices.len(),
        16,
        "2 GPUs x 8"
    );

    // Relabelled: the t4 config's renamed resource on its own socket.
    std::fs::write(&label, "t4\n").unwrap();
    let mut reg = kubelet.next_registration().await;
    let got = (
        reg.request.resource_name.as_str(),
        reg.request.endpoint.as_str(),
    );
    assert_eq!(got, ("nvidia.com/gpu.shared", "nvidia-gpu.shared.sock"));
    assert_eq!(
        next_list(&mut reg, WAIT).await.devices.len(),
        6,
        "2 GPUs x 3"
    );
    assert!(
        !dir.path().join("nvidia-gpu.sock").exists(),
        "the old resource's socket is gone"
    );

    // The selected config turns invalid: still served, no new registration.
    std::fs::write(cfgs.join("t4"), "version: v2\n").unwrap();
    let quiet =
        tokio::time::timeout(Duration::from_millis(800), kubelet.registrations.recv()).await;
    assert!(quiet.is_err(), "an invalid config changed the registration");
    assert!(
        tokio::time::timeout(Duration::from_millis(100), reg.lists.recv())
            .await
            .is_err()
    );
    assert!(dir.path().join("nvidia-gpu.shared.sock").exists());
    assert_eq!(terminate(plugin).await.code(), Some(0));
    kubelet.stop().await;
}

#[test]
fn labels_writes_the_gfd_labels_as_an_nfd_feature_file() {
    let files = tempfile::tempdir().unwrap();
    let (cfg, inv) = node_files(files.path());
    let out = files.path().join("gpuhook.features");
    let st = Command::new(BIN)
        .args(["labels", "--config"])
        .arg(&cfg)
        .arg("--inventory")
        .arg(&inv)
        .arg("--output")
        .arg(&out)
        .status()
        .unwrap();
    assert!(st.success());
    let text = std::fs::read_to_string(&out).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    // kdp-facts §9: time-sliced without rename → `-SHARED`, replicas and strategy per resource.
    for want in [
        "nvidia.com/gpu.count=2",
        "nvidia.com/gpu.replicas=4",
        "nvidia.com/gpu.sharing-strategy=time-slicing",
        "nvidia.com/gpu.product=NVIDIA-L20-SHARED",
        "nvidia.com/gpu.memory=46068",
    ] {
        assert!(lines.contains(&want), "{want} missing from:\n{text}");
    }
    assert!(!files.path().join("gpuhook.tmp").exists());
}

/// `labels` (or `dry-run`) run on the node files with config text `cfg`; its stdout.
fn node_cmd(dir: &Path, cmd: &str, cfg: &str) -> String {
    let (_, inv) = node_files(dir);
    let path = dir.join("gfd.yaml");
    std::fs::write(&path, cfg).unwrap();
    let out = Command::new(BIN)
        .args([cmd, "--config"])
        .arg(&path)
        .arg("--inventory")
        .arg(&inv)
        .output()
        .unwrap();
    assert!(out.status.success(), "{cmd}: {:?}", out.stderr);
    String::from_utf8(out.stdout).unwrap()
}

/// GFD's `nvidia.com/gfd.timestamp` (Unix seconds; NVIDIA `internal/lm/timestamp.go:
/// NewTimestampLabeler`, left out with `flags.gfd.noTimestamp: true`) is in `labels`' output;
/// `dry-run`'s advertisement stays deterministic, without it.
#[test]
fn labels_carry_the_gfd_timestamp_unless_no_timestamp() {
    let files = tempfile::tempdir().unwrap();
    let now = || std::time::UNIX_EPOCH.elapsed().unwrap().as_secs();
    let before = now();
    let text = node_cmd(files.path(), "labels", "version: v1\n");
    let after = now();
    let stamp = text
        .lines()
        .find_map(|l| l.strip_prefix("nvidia.com/gfd.timestamp="))
        .unwrap_or_else(|| panic!("no gfd.timestamp in:\n{text}"));
    let stamp: u64 = stamp.parse().unwrap();
    assert!((before..=after).contains(&stamp), "{before}..{after}");
    let off = "version: v1\nflags:\n  gfd:\n    noTimestamp: true\n";
    let text = node_cmd(files.path(), "labels", off);
    assert!(!text.contains("gfd.timestamp"), "noTimestamp: {text}");
    assert!(text.contains("nvidia.com/gpu.count=2"), "{text}");
    let dry = node_cmd(files.path(), "dry-run", "version: v1\n");
    assert!(dry.contains("nvidia.com/gpu.count"), "{dry}");
    assert!(!dry.contains("gfd.timestamp"), "dry-run: {dry}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mps_replicas_are_listed_only_while_the_gpus_daemon_is_ready() {
    let files = tempfile::tempdir().unwrap();
    let (_, inv) = node_files(files.path());
    let root = files.path().join("mps");
    let cfg = files.path().join("mps.yaml");
    let yaml = format!(
        "version: v1\nflags:\n  mpsRoot: {}\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n",
        root.display()
    );
    std::fs::write(&cfg, yaml).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut kubelet = FakeKubelet::start(dir.path());
    let plugin = serve(&cfg, &inv, dir.path(), &[]);
    let mut reg = kubelet.next_registration().await;
    assert_eq!(reg.request.resource_name, "nvidia.com/gpu");
    assert!(
        next_list(&mut reg, WAIT).await.devices.is_empty(),
        "no daemon is ready"
    );

    // gpu-mps-daemon marks GPU 0 ready (`<mpsRoot>/<uuid>/ready`) a moment before its CDI
    // spec lists the GPU: nothing is advertised yet (a share would have no limits) ...
    let uuid0 = common::node::inventory().gpus[0].uuid.clone();
    std::fs::create_dir_all(root.join(&uuid0)).unwrap();
    std::fs::write(root.join(&uuid0).join("ready"), "").unwrap();
    let spec_path = root.join("nvidia.com-gpu-mps.json");
    let status = serde_json::json!({"cdi": {"specPath": spec_path, "devices": []}});
    std::fs::write(root.join("status.json"), status.to_string()).unwrap();
    // (A reload may send the same empty list again or nothing at all; never devices.)
    if let Ok(list) = tokio::time::timeout(Duration::from_secs(2), reg.lists.recv()).await {
        let devices = list.expect("ListAndWatch ended").devices;
        assert!(devices.is_empty(), "ready but not yet in the daemon's spec");
    }
    // ... then the daemon publishes the GPU's device in its spec: its two shares appear.
    let spec = serde_json::json!({"kind": "nvidia.com/gpu-mps", "devices": [{"name": uuid0,
        "containerEdits": {"env": ["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50"]}}]});
    std::fs::write(&spec_path, spec.to_string()).unwrap();
    let ids: Vec<String> = next_list(&mut reg, WAIT)
        .await
        .devices
        .into_iter()
        .map(|d| d.id)
        .collect();
    assert_eq!(ids, [format!("{uuid0}::0"), format!("{uuid0}::1")]);

    // The daemon stops being ready: the shares go away again.
    std::fs::remove_file(root.join(&uuid0).join("ready")).unwrap();
    assert!(next_list(&mut reg, WAIT).await.devices.is_empty());
    assert_eq!(terminate(plugin).await.code(), Some(0));
    kubelet.stop().await;
}

#[test]
fn serve_refuses_an_invalid_first_config_naming_file_and_key() {
    let files = tempfile::tempdir().unwrap();
    let (cfg, inv) = node_files(files.path());
    std::fs::write(&cfg, "version: v1\nflags:\n  migStrategy: sideways\n").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&cfg)
        .arg("--inventory")
        .arg(&inv)
        .arg("--plugin-dir")
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&cfg.display().to_string())
            && err.contains("migStrategy")
            && err.contains("sideways"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "nothing created"
    );
}

const MIG_UUID: &str = "MIG-11111111-2222-5333-8444-555555555555";

/// The test node with GPU 0 in MIG mode holding one 1g.10gb device (GI 9, cap minors 84/85).
fn mig_inventory(dev_root: &Path) -> gpuhook_node::Inventory {
    let mut inv = common::node::inventory();
    inv.dev_root = dev_root.to_path_buf();
    inv.gpus[0].mig_enabled = true;
    inv.gpus[0].mig_devices = vec![gpuhook_node::MigDevice {
        index: 0,
        parent_index: 0,
        gi_id: 9,
        ci_id: 0,
        uuid: MIG_UUID.into(),
        memory_mib: 9728,
        profile: Some("1g.10gb".into()),
        gi_cap_minor: 84,
        ci_cap_minor: 85,
    }];
    inv
}

/// Config (mixed, passDeviceSpecs, cdi-cri + envvar), MIG inventory and a dev root holding
/// only `/dev/nvidiactl`.
fn mig_node(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let (cfg, _) = node_files(dir);
    let dev_root = dir.join("devroot");
    std::fs::create_dir_all(dev_root.join("dev")).unwrap();
    std::fs::write(dev_root.join("dev/nvidiactl"), "").unwrap();
    let inv_path = dir.join("mig.json");
    let inv = serde_json::to_string(&mig_inventory(&dev_root)).unwrap();
    std::fs::write(&inv_path, inv).unwrap();
    let yaml = "version: v1\nflags:\n  migStrategy: mixed\n  plugin:\n    passDeviceSpecs: true\n    deviceListStrategy: [cdi-cri, envvar]\n";
    std::fs::write(&cfg, yaml).unwrap();
    (cfg, inv_path, dev_root)
}

/// A MIG device under `migStrategy: mixed`, answered with cdi-cri + envvar and passDeviceSpecs
/// (NVIDIA returns before the device specs when every strategy is CDI): its own
/// resource and socket, gpuhook's CDI name (the MIG UUID) and its device nodes (parent GPU
/// node, GI and CI capability nodes), host paths under the dev root.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mig_mixed_device_gets_its_cdi_name_and_device_nodes() {
    let files = tempfile::tempdir().unwrap();
    let (cfg, inv_path, dev_root) = mig_node(files.path());
    let dir = tempfile::tempdir().unwrap();
    let mut kubelet = FakeKubelet::start(dir.path());
    let plugin = serve(&cfg, &inv_path, dir.path(), &[]);
    let mut regs = [
        kubelet.next_registration().await,
        kubelet.next_registration().await,
    ];
    regs.sort_by(|a, b| a.request.resource_name.cmp(&b.request.resource_name));
    let got: Vec<String> = regs
        .iter()
        .map(|r| format!("{} {}", r.request.resource_name, r.request.endpoint))
        .collect();
    let want = [
        "nvidia.com/gpu nvidia-gpu.sock",
        "nvidia.com/mig-1g.10gb nvidia-mig-1g.10gb.sock",
    ];
    assert_eq!(got, want);
    let mig = &mut regs[1];
    let ids: Vec<String> = next_list(mig, WAIT)
        .await
        .devices
        .into_iter()
        .map(|d| d.id)
        .collect();
    assert_eq!(ids, [MIG_UUID]);
    let req = api::AllocateRequest {
        container_requests: vec![api::ContainerAllocateRequest { devices_ids: ids }],
    };
    let r = mig
        .client
        .allocate(req)
        .await
        .unwrap()
        .into_inner()
        .container_responses
        .remove(0);
    let names: Vec<&str> = r.cdi_devices.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, [format!("nvidia.com/gpu={}", MIG_UUID)]);
    assert_eq!(
        r.envs.get("NVIDIA_VISIBLE_DEVICES").map(String::as_str),
        Some(MIG_UUID)
    );
    let specs: Vec<(String, String, String)> = r
        .devices
        .iter()
        .map(|d| {
            (
                d.container_path.clone(),
                d.host_path.clone(),
                d.permissions.clone(),
            )
        })
        .collect();
    let want: Vec<(String, String, String)> = [
        "/dev/nvidiactl",
        "/dev/nvidia0",
        "/dev/nvidia-caps/nvidia-cap84",
        "/dev/nvidia-caps/nvidia-cap85",
    ]
    .iter()
    .map(|p| {
        (
            p.to_string(),
            dev_root.join(&p[1..]).display().to_string(),
            "rw".to_string(),
        )
    })
    .collect();
    assert_eq!(specs, want);
    assert_eq!(terminate(plugin).await.code(), Some(0));
    kubelet.stop().await;
}

/// Logs are for operators' collectors: no colour codes off a terminal, and one JSON object a
/// line with `--log-format json` (issue #17.6); the error itself stays on stderr, stdout empty.
#[test]
fn logs_have_no_colours_off_a_terminal_and_json_on_request() {
    let files = tempfile::tempdir().unwrap();
    let (cfg, _) = node_files(files.path());
    let run = |format: &str| {
        Command::new(BIN)
            .args(["--log-format", format, "serve", "--config"])
            .arg(&cfg)
            .args(["--driver-root", "/nonexistent-driver-root", "--plugin-dir"])
            .arg(files.path().join("plugins"))
            .env_remove("RUST_LOG")
            .output()
            .unwrap()
    };
    let text = run("text");
    let err = String::from_utf8_lossy(&text.stderr);
    assert!(err.contains("WARN") && err.contains("no NVML"), "{err}");
    assert!(
        !err.contains('\u{1b}'),
        "colour codes off a terminal: {err:?}"
    );
    assert!(text.stdout.is_empty());
    let json = run("json");
    let err = String::from_utf8_lossy(&json.stderr);
    let logs: Vec<serde_json::Value> = err
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).expect("a log line is one JSON object"))
        .collect();
    assert!(
        logs.iter().any(|l| l["level"] == "WARN"),
        "no JSON log line in {err}"
    );
}
