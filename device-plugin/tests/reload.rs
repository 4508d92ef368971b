//! The serving loop reloads only on a real change (#22): gpu-mps-daemon rewrites `status.json`
//! on every probe, which must cost no config load and log no "config reloaded"; a real change
//! (a GPU's daemon no longer ready) is still applied at once.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test crate: a panic is a test failure

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::node::{inventory, node_files, terminate, Plugin, BIN};
use common::{next_list, FakeKubelet, WAIT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_json_rewrites_reload_nothing() {
    let files = tempfile::tempdir().unwrap();
    let (_, inv) = node_files(files.path());
    let root = files.path().join("mps");
    let cfg = files.path().join("mps.yaml");
    std::fs::write(
        &cfg,
        format!(
            "version: v1\nflags:\n  mpsRoot: {}\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n",
            root.display()
        ),
    )
    .unwrap();
    // GPU 0's daemon is ready and published in the spec the status names.
    let uuid0 = inventory().gpus[0].uuid.clone();
    std::fs::create_dir_all(root.join(&uuid0)).unwrap();
    std::fs::write(root.join(&uuid0).join("ready"), "").unwrap();
    let spec_path = root.join("nvidia.com-gpu-mps.json");
    let spec = |pct: u32| {
        serde_json::json!({"kind": "nvidia.com/gpu-mps", "devices": [{"name": uuid0,
            "containerEdits": {"env": [format!("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={pct}")]}}]})
        .to_string()
    };
    std::fs::write(&spec_path, spec(50)).unwrap();
    let status = |probe: u32| {
        serde_json::json!({"cdi": {"specPath": spec_path, "devices": [uuid0]},
            "gpus": [{"uuid": uuid0, "lastProbe": probe}]})
        .to_string()
    };
    std::fs::write(root.join("status.json"), status(0)).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let mut kubelet = FakeKubelet::start(dir.path());
    let log = files.path().join("plugin.log");
    let child = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&cfg)
        .arg("--inventory")
        .arg(&inv)
        .arg("--plugin-dir")
        .arg(dir.path())
        .env("RUST_LOG", "info,gpuhook_device_plugin=debug")
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let plugin = Plugin(child);
    let mut reg = kubelet.next_registration().await;
    assert_eq!(next_list(&mut reg, WAIT).await.devices.len(), 2);

    // Ten probes, each rewriting status.json (new content, same spec), a poll or more apart.
    for probe in 1..=10 {
        std::fs::write(root.join("status.json"), status(probe)).unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // The daemon stops being ready: applied at once.
    std::fs::remove_file(root.join(&uuid0).join("ready")).unwrap();
    assert!(next_list(&mut reg, WAIT).await.devices.is_empty());
    assert_eq!(terminate(plugin).await.code(), Some(0));
    kubelet.stop().await;

    let text = std::fs::read_to_string(&log).unwrap();
    let loads = text.matches("the config's inputs changed: loading").count();
    let reloaded = text.matches("config reloaded").count();
    // One load may come with the first rewrite (the MPS inputs join the fingerprint after the
    // first load), one for the readiness change; none for the other nine probes.
    assert!(loads <= 2, "{loads} loads for 10 status rewrites:\n{text}");
    assert_eq!(reloaded, 1, "only the real change is a reload:\n{text}");
}
