//! An MPS claim end to end against the nvidia-cuda-mps-control simulator: the claim's control
//! daemon is up with the claim's limits before NodePrepareResources answers, a client connecting
//! through the claim's CDI spec (pipe dir) gets exactly those limits, and unprepare (also after
//! a plugin restart) stops the daemon and removes its dirs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "common/apiserver.rs"]
mod apiserver;
#[path = "common/kubelet.rs"]
mod kubelet;
#[path = "common/plugin.rs"]
mod plugin;

use std::path::{Path, PathBuf};
use std::process::Command;

use apiserver::ApiServer;
use gpuhook_dra::api::{self, v1::DRAPluginClient};
use gpuhook_dra::testkit::{claim, opaque};
use plugin::{plugin_with, NODE};
use serde_json::json;

/// The simulator next to our binary (`cargo build -p gpuhook-sim-mps-control`); `None` skips,
/// except under GPUHOOK_REQUIRE_E2E=1.
fn sim() -> Option<PathBuf> {
    let p = PathBuf::from(env!("CARGO_BIN_EXE_gpuhook-dra-plugin"))
        .with_file_name("sim-nvidia-cuda-mps-control");
    if p.exists() {
        return Some(p);
    }
    assert!(
        std::env::var_os("GPUHOOK_REQUIRE_E2E").is_none_or(|v| v != "1"),
        "{} is missing: cargo build -p gpuhook-sim-mps-control",
        p.display()
    );
    eprintln!("skipped: {} is missing", p.display());
    None
}

/// NVIDIA's MPS example config: 25 % of the threads, 10 GiB pinned memory.
fn mps_claim(api: &ApiServer, name: &str, uid: &str) -> api::Claim {
    let cfg = opaque(
        &["shared-gpu"],
        json!({"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
               "sharing": {"strategy": "MPS", "mpsConfig": {
                   "defaultActiveThreadPercentage": 25, "defaultPinnedDeviceMemoryLimit": "10Gi"}}}),
    );
    api.add_claim(claim(
        "ns",
        name,
        uid,
        NODE,
        &[("shared-gpu", "gpu-0")],
        vec![cfg],
    ));
    kubelet::claim("ns", name, uid)
}

/// A CUDA client as the claim's container runs it: the pipe dir the CDI spec mounts.
fn client_sees(sim: &Path, pipe: &Path) -> String {
    let out = Command::new(sim)
        .env_clear()
        .env("CUDA_MPS_PIPE_DIRECTORY", pipe)
        .args(["--sim-client", "--uid", "0", "--hold", "0"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn daemon_pid(dir: &Path) -> i32 {
    let rec = std::fs::read_to_string(dir.join("control-daemon.id")).unwrap();
    rec.split_whitespace().next().unwrap().parse().unwrap()
}

fn alive(pid: i32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z ")
}

async fn prepare(
    channel: tonic::transport::Channel,
    c: api::Claim,
) -> api::NodePrepareResourceResponse {
    let uid = c.uid.clone();
    let mut v1 = DRAPluginClient::new(channel);
    let mut r = v1
        .node_prepare_resources(api::NodePrepareResourcesRequest { claims: vec![c] })
        .await
        .unwrap()
        .into_inner();
    r.claims.remove(&uid).unwrap()
}

#[tokio::test]
async fn mps_claim_limits_are_in_force_for_the_first_client() {
    let Some(sim) = sim() else { return };
    let dir = tempfile::tempdir().unwrap();
    let api = ApiServer::start(NODE);
    let c = mps_claim(&api, "mps", "uid-mps");
    let p = plugin_with(dir.path(), &api, &sim);
    let k = kubelet::register(&dir.path().join("plugins_registry"), "gpu.nvidia.com").await;
    let r = prepare(k.channel.clone(), c.clone()).await;
    assert_eq!(r.error, "");
    let claim_dir = dir.path().join("plugin/mps/uid-mps");
    let pipe = claim_dir.join("pipe");
    let spec =
        std::fs::read_to_string(dir.path().join("cdi/k8s.gpu.nvidia.com-claim_uid-mps.json"))
            .unwrap();
    assert!(
        spec.contains("CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps"),
        "{spec}"
    );
    let v: serde_json::Value = serde_json::from_str(&spec).unwrap();
    let mount = &v["containerEdits"]["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["containerPath"] == "/tmp/nvidia-mps")
        .cloned()
        .unwrap();
    assert_eq!(mount["hostPath"], pipe.display().to_string());
    // The start check of gpu-mps-daemon's specs, on the claim's device, naming its pipe dir.
    let share = format!("k8s.gpu.nvidia.com/claim=uid-mps-gpu-0::{}", pipe.display());
    let hooks = &v["devices"][0]["containerEdits"]["hooks"];
    assert!(
        hooks.as_array().unwrap().iter().any(|h| {
            h["hookName"] == "createContainer"
                && h["args"]
                    .as_array()
                    .unwrap()
                    .windows(2)
                    .any(|w| w[0] == "--mps-share" && w[1] == share.as_str())
        }),
        "{hooks}"
    );
    // What that check reads: the ready marker beside the pipe dir, written after the read-back.
    let ready: serde_json::Value =
        serde_json::from_slice(&std::fs::read(claim_dir.join("ready")).unwrap()).unwrap();
    assert_eq!(ready["pipeDirectory"], pipe.display().to_string());
    if plugin::is_root() {
        // The daemon's own /dev/shm dir, mounted at /dev/shm (NVIDIA's claim edits), mode 1777.
        use std::os::unix::fs::PermissionsExt;
        let shm = v["containerEdits"]["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["containerPath"] == "/dev/shm")
            .cloned()
            .unwrap();
        assert_eq!(shm["hostPath"], claim_dir.join("shm").display().to_string());
        let mode = std::fs::metadata(claim_dir.join("shm"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o7777, 0o1777);
    }
    let seen = client_sees(&sim, &pipe);
    assert!(
        seen.contains("active_thread_percentage=25.0 pinned_mem_limit=0=10240M"),
        "{seen}"
    );
    let pid = daemon_pid(&claim_dir);
    assert!(alive(pid));
    let mut v1 = DRAPluginClient::new(k.channel);
    let u = v1
        .node_unprepare_resources(api::NodeUnprepareResourcesRequest { claims: vec![c] })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(u.claims["uid-mps"].error, "");
    assert!(!alive(pid), "the claim's daemon is stopped");
    assert!(!claim_dir.exists());
    p.stop().await;
}

/// The daemon outlives a plugin restart (its clients keep running) and the next run stops it at
/// unprepare, from the checkpoint and the daemon's identity record.
#[tokio::test]
async fn mps_daemon_is_stopped_after_a_plugin_restart() {
    let Some(sim) = sim() else { return };
    let dir = tempfile::tempdir().unwrap();
    let api = ApiServer::start(NODE);
    let c = mps_claim(&api, "mps", "uid-r");
    let p = plugin_with(dir.path(), &api, &sim);
    let k = kubelet::register(&dir.path().join("plugins_registry"), "gpu.nvidia.com").await;
    assert_eq!(prepare(k.channel, c.clone()).await.error, "");
    let claim_dir = dir.path().join("plugin/mps/uid-r");
    let pid = daemon_pid(&claim_dir);
    p.stop().await;
    assert!(
        alive(pid),
        "prepared claims keep their daemon across a restart"
    );
    let p = plugin_with(dir.path(), &api, &sim);
    let k = kubelet::register(&dir.path().join("plugins_registry"), "gpu.nvidia.com").await;
    let mut v1 = DRAPluginClient::new(k.channel);
    let u = v1
        .node_unprepare_resources(api::NodeUnprepareResourcesRequest { claims: vec![c] })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(u.claims["uid-r"].error, "");
    for _ in 0..100 {
        if !alive(pid) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(!alive(pid), "the stale daemon is stopped");
    assert!(!claim_dir.exists());
    p.stop().await;
}

/// A daemon that dies (killed: its socket file stays) loses its ready marker at once, so the
/// claim's start check refuses new containers, and is restarted with the claim's limits (held
/// at its start by the simulator's gate file `GPUHOOK_SIM_MPS_HOLD` until the test has seen the
/// window); unprepare stops the replacement. Compute modes: `tests/mps_supervise.rs`.
#[tokio::test]
async fn a_daemon_that_dies_is_restarted_with_the_claims_limits() {
    let Some(sim) = sim() else { return };
    let dir = tempfile::tempdir().unwrap();
    let gate = dir.path().join("hold");
    let wrapper = dir.path().join("nvidia-cuda-mps-control");
    let script = format!(
        "#!/bin/sh\nexport GPUHOOK_SIM_MPS_HOLD='{}'\nexec '{}' \"$@\"\n",
        gate.display(),
        sim.display()
    );
    gpuhook_fs::testing::write_executable(&wrapper, &script).unwrap();
    let api = ApiServer::start(NODE);
    let c = mps_claim(&api, "mps", "uid-k");
    let p = plugin_with(dir.path(), &api, &wrapper);
    let k = kubelet::register(&dir.path().join("plugins_registry"), "gpu.nvidia.com").await;
    assert_eq!(prepare(k.channel.clone(), c.clone()).await.error, "");
    let claim_dir = dir.path().join("plugin/mps/uid-k");
    let (ready, pipe) = (claim_dir.join("ready"), claim_dir.join("pipe"));
    assert!(ready.exists());
    let pid = daemon_pid(&claim_dir);
    std::fs::write(&gate, "").unwrap();
    let st = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let held = dir.path().join("hold.waiting");
    wait_long("the replacement held at its start", || held.exists()).await;
    assert!(!ready.exists(), "no ready marker while the daemon is down");
    std::fs::remove_file(&gate).unwrap();
    wait_long("the ready marker of the replacement", || {
        std::fs::read(&ready)
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .and_then(|v| v["pid"].as_i64())
            .is_some_and(|p| p != i64::from(pid))
    })
    .await;
    let seen = client_sees(&sim, &pipe);
    assert!(
        seen.contains("active_thread_percentage=25.0 pinned_mem_limit=0=10240M"),
        "{seen}"
    );
    let new = daemon_pid(&claim_dir);
    let mut v1 = DRAPluginClient::new(k.channel);
    let u = v1
        .node_unprepare_resources(api::NodeUnprepareResourcesRequest { claims: vec![c] })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(u.claims["uid-k"].error, "");
    assert!(!alive(new), "the replacement is stopped");
    assert!(!claim_dir.exists());
    p.stop().await;
}

/// Waits for `f` with a generous deadline (a loaded CI machine).
async fn wait_long<F: Fn() -> bool>(what: &str, f: F) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !f() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
