//! `serve` in NVIDIA's environment (#22): `NODE_NAME` set, as NVIDIA's chart always sets it, with
//! one config file serves outside a cluster; with named configs the label matters and outside a
//! cluster that is a clear error. And the node-label file goes through gpuhook-fs's writer.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test crate: a panic is a test failure

mod common;

use common::node::{named_configs, node_files, terminate};
use common::{next_list, FakeKubelet, WAIT};
use gpuhook_device_plugin::node_label::store;

/// NVIDIA's chart always sets `NODE_NAME`; with one config file there is no named config to
/// choose, so `serve` starts outside a cluster and says the label is not followed (#22).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_name_with_one_config_file_serves_without_a_cluster() {
    let files = tempfile::tempdir().unwrap();
    let (cfg, inv) = node_files(files.path());
    let dir = tempfile::tempdir().unwrap();
    let mut kubelet = FakeKubelet::start(dir.path());
    let log = files.path().join("plugin.log");
    let child = std::process::Command::new(common::node::BIN)
        .args(["serve", "--config"])
        .arg(&cfg)
        .arg("--inventory")
        .arg(&inv)
        .arg("--plugin-dir")
        .arg(dir.path())
        .env("NODE_NAME", "node-1")
        .env("NO_COLOR", "1")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let plugin = common::node::Plugin(child);
    let mut reg = kubelet.next_registration().await;
    assert_eq!(reg.request.resource_name, "nvidia.com/gpu");
    assert_eq!(next_list(&mut reg, WAIT).await.devices.len(), 8);
    assert_eq!(terminate(plugin).await.code(), Some(0));
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("the config is one file: the node's label is not followed"),
        "{text}"
    );
    kubelet.stop().await;
}

/// With a directory of named configs the label matters: outside a cluster that is an error.
#[test]
fn a_node_name_with_named_configs_outside_a_cluster_is_a_clear_error() {
    let files = tempfile::tempdir().unwrap();
    let (_, inv) = node_files(files.path());
    let cfgs = named_configs(files.path());
    let out = std::process::Command::new(common::node::BIN)
        .args(["serve", "--node-name", "node-1", "--config"])
        .arg(&cfgs)
        .arg("--inventory")
        .arg(&inv)
        .arg("--plugin-dir")
        .arg(files.path())
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("KUBERNETES_SERVICE_HOST is not set"), "{err}");
    assert_eq!(
        err.matches("KUBERNETES_SERVICE_HOST").count(),
        1,
        "cause printed once: {err}"
    );
}

/// The label file goes through gpuhook-fs's writer: no fixed `<file>.tmp` that a symlink planted
/// beside it could redirect (the old write-and-rename wrote through `node-label.tmp`) (#22).
#[test]
fn store_writes_through_the_atomic_writer_not_a_fixed_tmp_name() {
    let d = tempfile::tempdir().unwrap();
    let victim = d.path().join("victim");
    std::fs::write(&victim, "keep").unwrap();
    let p = d.path().join("node-label");
    std::os::unix::fs::symlink(&victim, d.path().join("node-label.tmp")).unwrap();
    assert!(store(&p, Some("t4")).unwrap());
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
    assert_eq!(std::fs::read_to_string(&p).unwrap(), "t4");
    assert!(std::fs::symlink_metadata(&p).unwrap().file_type().is_file());
    // A symlink at the label path itself is refused, not followed.
    std::fs::remove_file(&p).unwrap();
    std::os::unix::fs::symlink(&victim, &p).unwrap();
    assert!(store(&p, Some("l20")).is_err());
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
}
