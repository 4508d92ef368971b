//! The binary as a DaemonSet runs it: `serve` registers with the kubelet, follows NVML health
//! events, and on SIGTERM removes its sockets and exits 0; `dry-run` prints the advertisement
//! without a kubelet.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test crate: a panic is a test failure

mod common;

use std::process::Command;
use std::time::Duration;

use common::node::{inventory, mock_nvml, node_files, serve, terminate, BIN};
use common::{next_list, FakeKubelet, WAIT};
use gpuhook_device_plugin::api;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_registers_and_sigterm_removes_sockets_and_exits_0() {
    let files = tempfile::tempdir().unwrap();
    let (cfg, inv) = node_files(files.path());
    let dir = tempfile::tempdir().unwrap();
    let mut kubelet = FakeKubelet::start(dir.path());
    let plugin = serve(&cfg, &inv, dir.path(), &[]);
    let mut reg = kubelet.next_registration().await;
    let got = (
        reg.request.resource_name.as_str(),
        reg.request.endpoint.as_str(),
    );
    assert_eq!(got, ("nvidia.com/gpu", "nvidia-gpu.sock"));
    let list = next_list(&mut reg, WAIT).await;
    assert_eq!(list.devices.len(), 8, "2 GPUs x 4 replicas");
    assert!(list.devices.iter().all(|d| d.id.contains("::")));
    assert!(dir.path().join("nvidia-gpu.sock").exists());

    let status = terminate(plugin).await;
    assert_eq!(status.code(), Some(0), "exit status after SIGTERM");
    assert!(
        !dir.path().join("nvidia-gpu.sock").exists(),
        "socket left behind"
    );
    assert!(
        dir.path().join("kubelet.sock").exists(),
        "the kubelet's socket is not ours to remove"
    );
    kubelet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn critical_xid_marks_the_gpu_unhealthy_in_list_and_watch_within_a_second() {
    let files = tempfile::tempdir().unwrap();
    let (cfg, inv) = node_files(files.path());
    let lib = mock_nvml(files.path());
    let dir = tempfile::tempdir().unwrap();
    let mut kubelet = FakeKubelet::start(dir.path());
    let plugin = serve(
        &cfg,
        &inv,
        dir.path(),
        &["--nvml-lib".as_ref(), lib.as_os_str()],
    );
    let mut reg = kubelet.next_registration().await;
    let first = next_list(&mut reg, WAIT).await;
    assert!(
        first.devices.iter().all(|d| d.health == "Healthy"),
        "{first:?}"
    );

    // Xid 48 (double-bit ECC) is critical and not ignored by default.
    let gpu1 = inventory().gpus[1].uuid.clone();
    let events = files.path().join("gpuhook-sim-state/events");
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(events)
        .unwrap();
    std::io::Write::write_all(&mut f, format!("xid {gpu1} 48\n").as_bytes()).unwrap();
    drop(f);
    let after = next_list(&mut reg, Duration::from_secs(1)).await;
    for d in &after.devices {
        let want = if d.id.starts_with(gpu1.as_str()) {
            "Unhealthy"
        } else {
            "Healthy"
        };
        assert_eq!(d.health, want, "{}", d.id);
    }
    assert_eq!(terminate(plugin).await.code(), Some(0));
    kubelet.stop().await;
}

#[test]
fn dry_run_prints_the_advertisement_as_json() {
    let files = tempfile::tempdir().unwrap();
    let (cfg, inv) = node_files(files.path());
    let out = Command::new(BIN)
        .args(["dry-run", "--config"])
        .arg(&cfg)
        .arg("--inventory")
        .arg(&inv)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let text = v.to_string();
    assert!(
        text.contains("GPU-00000001-1111-2222-3333-444455556666::3"),
        "{text}"
    );
    assert!(!text.contains("::4"), "{text}");
}

/// GetPreferredAllocation for one replica of the time-sliced 2-GPU node under `policy_line`
/// (a `flags.plugin` line or nothing), with `must` required and `size` wanted, when GPU 1
/// already has replicas ::0 and ::1 in use and GPU 0 none. The kubelet's order is unspecified
/// (a Go set): GPU 1's replicas come first here, so taking the first available ones would pick
/// the busier GPU.
async fn prefer(policy_line: &str, must: &[String], size: i32) -> Vec<String> {
    let files = tempfile::tempdir().unwrap();
    let (cfg, inv) = node_files(files.path());
    let yaml = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, format!("{yaml}flags:\n  plugin:\n{policy_line}")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut kubelet = FakeKubelet::start(dir.path());
    let plugin = serve(&cfg, &inv, dir.path(), &[]);
    let mut reg = kubelet.next_registration().await;
    next_list(&mut reg, WAIT).await;
    let gpus: Vec<String> = inventory().gpus.iter().map(|g| g.uuid.clone()).collect();
    let mut available: Vec<String> = (2..4).map(|n| format!("{}::{n}", gpus[1])).collect();
    available.extend((0..4).map(|n| format!("{}::{n}", gpus[0])));
    let req = api::PreferredAllocationRequest {
        container_requests: vec![api::ContainerPreferredAllocationRequest {
            available_device_ids: available,
            must_include_device_ids: must.to_vec(),
            allocation_size: size,
        }],
    };
    let got = reg
        .client
        .get_preferred_allocation(req)
        .await
        .unwrap()
        .into_inner();
    assert_eq!(terminate(plugin).await.code(), Some(0));
    kubelet.stop().await;
    got.container_responses[0].device_ids.clone()
}

/// kdp-facts §7: distributed (the default) prefers the GPU with the fewest replicas in use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preferred_allocation_spreads_replicas_over_the_least_loaded_gpu() {
    let gpus: Vec<String> = inventory().gpus.iter().map(|g| g.uuid.clone()).collect();
    let one = prefer("", &[], 1).await;
    assert_eq!(one.len(), 1);
    assert!(
        one[0].starts_with(&gpus[0]),
        "least-loaded GPU 0 expected: {one:?}"
    );
    let must = [format!("{}::2", gpus[1])];
    let two = prefer("", &must, 2).await;
    assert_eq!(two.len(), 2);
    assert_eq!(two[0], must[0], "must_include comes first");
    assert!(two[1].starts_with(&gpus[0]), "{two:?}");
}

/// kdp-facts §7: `sharedDevicesAllocationPolicy: packed` prefers the GPU with the most in use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn packed_policy_fills_the_busiest_gpu_first() {
    let gpus: Vec<String> = inventory().gpus.iter().map(|g| g.uuid.clone()).collect();
    let one = prefer("    sharedDevicesAllocationPolicy: packed\n", &[], 1).await;
    assert_eq!(one.len(), 1);
    assert!(
        one[0].starts_with(&gpus[1]),
        "busiest GPU 1 expected: {one:?}"
    );
}
