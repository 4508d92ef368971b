//! A prepared MPS claim's control daemon is supervised (issue #25), on a simulated node
//! (`gpuhook-sim build l20-minimal`: compute modes through its mock NVML, which the simulated
//! CUDA client reads like the CUDA driver):
//! - killed (`kill -9`): the ready marker goes, the GPU is PROHIBITED, so a CUDA process of the
//!   claim's running containers that finds no daemon is refused (NVIDIA: without a daemon a
//!   client "continues to run as it normally would without MPS", `nvidia-cuda-mps-control(1)`,
//!   i.e. unlimited; PROHIBITED: "No contexts can be created on this device", CUDA Driver API
//!   `CUcomputemode`), then the daemon is back with the claim's limits, EXCLUSIVE_PROCESS again;
//! - a plugin restart adopts a live daemon (same pid, and watched: killed later, it is
//!   restarted) and restarts one found dead.
//!
//! The restart window is held open deterministically: the replacement waits before binding its
//! socket while a gate file exists (`GPUHOOK_SIM_MPS_HOLD`) and says so with `<gate>.waiting`.
//!
//! Needs root and `cargo build -p gpuhook-sim --bins -p gpuhook-mock-nvml -p
//! gpuhook-sim-mps-control`; skipped otherwise, a failure under GPUHOOK_REQUIRE_E2E=1.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "common/apiserver.rs"]
mod apiserver;
#[path = "common/kubelet.rs"]
mod kubelet;
#[path = "common/plugin.rs"]
mod plugin;
#[path = "common/sim.rs"]
mod sim;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::Duration;

use apiserver::ApiServer;
use gpu_mps_daemon::node::NvmlComputeMode;
use gpuhook_dra::api::{self, v1::DRAPluginClient};
use gpuhook_dra::config::Allowed;
use gpuhook_dra::run::Running;
use gpuhook_dra::testkit::{claim, opaque};
use gpuhook_node::{ComputeMode, DiscoverOptions, Nvml, NvmlLocation};
use plugin::{driver_options, start_with, NODE};
use serde_json::json;

/// The l20-minimal profile's library dir.
const LIB: &str = "usr/lib/x86_64-linux-gnu";
const UID: &str = "uid-sup";

struct Node {
    tmp: tempfile::TempDir,
    root: PathBuf,
    uuid: String,
    gate: PathBuf,
    nvml: Nvml,
}

impl Node {
    /// An l20-minimal node whose control binary holds its start while `gate` exists.
    fn build(test: &str) -> Option<Node> {
        let tmp = tempfile::tempdir().unwrap();
        let root = sim::sim_node(tmp.path(), "l20-minimal", test)?;
        let (bin, real) = (
            root.join("usr/bin/nvidia-cuda-mps-control"),
            root.join("usr/bin/sim-nvidia-cuda-mps-control"),
        );
        std::fs::rename(&bin, &real).unwrap();
        let gate = tmp.path().join("hold");
        let script = format!(
            "#!/bin/sh\nexport GPUHOOK_SIM_MPS_HOLD='{}'\nexec '{}' \"$@\"\n",
            gate.display(),
            real.display()
        );
        gpuhook_fs::testing::write_executable(&bin, &script).unwrap();
        let inv = gpuhook_node::discover(&DiscoverOptions::for_root(&root)).unwrap();
        let uuid = inv.inventory.gpus[0].uuid.clone();
        let nvml = Nvml::load(&NvmlLocation::locate(&root, None).unwrap()).unwrap();
        Some(Node {
            tmp,
            root,
            uuid,
            gate,
            nvml,
        })
    }

    fn dir(&self) -> &Path {
        self.tmp.path()
    }

    fn claim_dir(&self) -> PathBuf {
        self.dir().join("plugin/mps").join(UID)
    }

    fn mode(&self) -> ComputeMode {
        self.nvml.compute_mode(&self.uuid).unwrap()
    }

    /// The plugin on this node, serving NVIDIA's MPS example claim (25 %, 10 GiB) on its GPU.
    fn plugin(&self, api: &ApiServer) -> Running {
        let d = DiscoverOptions::for_root(&self.root);
        let inv = gpuhook_node::discover(&d).unwrap().inventory;
        let bin = self.root.join("usr/bin/nvidia-cuda-mps-control");
        let mut opts = driver_options(self.dir(), &bin, Allowed::default());
        opts.mps.driver_root = self.root.clone();
        opts.mps.start_timeout = Duration::from_secs(20);
        opts.mps.command_timeout = Duration::from_secs(20);
        let nvml = Nvml::load(&NvmlLocation::locate(&self.root, None).unwrap()).unwrap();
        opts.mps.compute = Arc::new(NvmlComputeMode(nvml));
        start_with(self.dir(), api, opts, None, inv, None)
    }

    /// A CUDA application of the claim's containers: the claim's pipe dir, its GPU, the
    /// driver's libraries (NVML: the compute mode).
    fn client(&self) -> Output {
        Command::new(self.root.join("usr/bin/sim-nvidia-cuda-mps-control"))
            .env_clear()
            .env("CUDA_MPS_PIPE_DIRECTORY", self.claim_dir().join("pipe"))
            .env("CUDA_VISIBLE_DEVICES", &self.uuid)
            .env("LD_LIBRARY_PATH", self.root.join(LIB))
            .args(["--sim-client", "--uid", "0", "--hold", "0"])
            .output()
            .unwrap()
    }

    fn client_gets_the_limits(&self) {
        let out = self.client();
        let seen = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success()
                && seen.contains("active_thread_percentage=25.0 pinned_mem_limit=0=10240M"),
            "{}",
            text(&out)
        );
    }

    /// The pid the ready marker names, once it is there and names another pid than `not`.
    async fn ready_pid(&self, not: i64) -> i64 {
        let ready = self.claim_dir().join("ready");
        let mut pid = 0;
        wait_for("the ready marker of a new daemon", || {
            let v: Option<serde_json::Value> = std::fs::read(&ready)
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok());
            pid = v.and_then(|v| v["pid"].as_i64()).unwrap_or(0);
            pid != 0 && pid != not
        })
        .await;
        pid
    }
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Waits for `f` (a condition, generous deadline: a loaded CI machine).
async fn wait_for<F: FnMut() -> bool>(what: &str, mut f: F) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !f() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn alive(pid: i64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(')')
            .is_some_and(|(_, r)| !r.trim_start().starts_with('Z'))
    })
}

fn kill9(pid: i64) {
    let st = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    assert!(st.success());
}

fn waiting(gate: &Path) -> PathBuf {
    let mut w = gate.as_os_str().to_owned();
    w.push(".waiting");
    PathBuf::from(w)
}

async fn prepare(api: &ApiServer, k: &kubelet::Registered) -> api::Claim {
    let cfg = opaque(
        &["mps-gpu"],
        json!({"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
               "sharing": {"strategy": "MPS", "mpsConfig": {
                   "defaultActiveThreadPercentage": 25, "defaultPinnedDeviceMemoryLimit": "10Gi"}}}),
    );
    api.add_claim(claim(
        "ns",
        "mps",
        UID,
        NODE,
        &[("mps-gpu", "gpu-0")],
        vec![cfg],
    ));
    let c = kubelet::claim("ns", "mps", UID);
    let mut v1 = DRAPluginClient::new(k.channel.clone());
    let r = v1
        .node_prepare_resources(api::NodePrepareResourcesRequest {
            claims: vec![c.clone()],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.claims[UID].error, "");
    c
}

async fn unprepare(k: &kubelet::Registered, c: api::Claim) {
    let mut v1 = DRAPluginClient::new(k.channel.clone());
    let u = v1
        .node_unprepare_resources(api::NodeUnprepareResourcesRequest { claims: vec![c] })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(u.claims[UID].error, "");
}

async fn register(dir: &Path) -> kubelet::Registered {
    kubelet::register(&dir.join("plugins_registry"), "gpu.nvidia.com").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_claim_daemon_is_restarted_with_its_limits_and_the_gap_is_refused() {
    let Some(node) = Node::build("mps_supervise") else {
        return;
    };
    let before = node.mode();
    assert_ne!(before, ComputeMode::ExclusiveProcess);
    let api = ApiServer::start(NODE);
    let p = node.plugin(&api);
    let k = register(node.dir()).await;
    let c = prepare(&api, &k).await;
    assert_eq!(node.mode(), ComputeMode::ExclusiveProcess);
    node.client_gets_the_limits();
    let old = node.ready_pid(0).await;

    // Hold the replacement's start, then kill the claim's daemon.
    std::fs::write(&node.gate, "").unwrap();
    kill9(old);
    let held = waiting(&node.gate);
    wait_for("the replacement held at its start", || held.exists()).await;
    assert!(!node.claim_dir().join("ready").exists(), "not ready");
    assert_eq!(
        node.mode(),
        ComputeMode::Prohibited,
        "fenced from the death"
    );
    // No daemon answers: without the fence this client would run unlimited.
    let refused = node.client();
    assert!(!refused.status.success(), "{}", text(&refused));
    assert!(
        !String::from_utf8_lossy(&refused.stdout).contains("active_thread_percentage"),
        "{}",
        text(&refused)
    );
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("PROHIBITED"),
        "{}",
        text(&refused)
    );

    // Released: the claim's limits again, EXCLUSIVE_PROCESS again, ready again.
    std::fs::remove_file(&node.gate).unwrap();
    let new = node.ready_pid(old).await;
    assert!(alive(new));
    assert_eq!(node.mode(), ComputeMode::ExclusiveProcess);
    node.client_gets_the_limits();

    unprepare(&k, c).await;
    assert!(!alive(new), "the restarted daemon is stopped at unprepare");
    assert_eq!(node.mode(), before, "the mode before the claim is restored");
    assert!(!node.claim_dir().exists());
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unprepare_while_restarts_are_held_leaves_no_prohibited_gpu() {
    let Some(node) = Node::build("mps_supervise") else {
        return;
    };
    let before = node.mode();
    let api = ApiServer::start(NODE);
    let p = node.plugin(&api);
    let k = register(node.dir()).await;
    let c = prepare(&api, &k).await;
    let old = node.ready_pid(0).await;
    std::fs::write(&node.gate, "").unwrap();
    kill9(old);
    let held = waiting(&node.gate);
    wait_for("the replacement held at its start", || held.exists()).await;
    assert_eq!(node.mode(), ComputeMode::Prohibited);
    let held_pid: i64 = std::fs::read_to_string(&held)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    unprepare(&k, c).await;
    std::fs::remove_file(&node.gate).unwrap();
    wait_for("the held replacement to be stopped", || !alive(held_pid)).await;
    assert_eq!(node.mode(), before, "PROHIBITED left behind");
    assert!(!node.claim_dir().exists());
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_restart_adopts_a_live_daemon_and_restarts_a_dead_one() {
    let Some(node) = Node::build("mps_supervise") else {
        return;
    };
    let api = ApiServer::start(NODE);
    let p = node.plugin(&api);
    let k = register(node.dir()).await;
    let c = prepare(&api, &k).await;
    let first = node.ready_pid(0).await;
    p.stop().await;
    assert!(alive(first), "the daemon outlives the plugin");

    // Live at start: adopted, not restarted...
    let p = node.plugin(&api);
    let _k = register(node.dir()).await;
    assert!(alive(first), "adopted, not restarted");
    node.client_gets_the_limits();
    // ...and watched: killed, it is restarted with the claim's limits.
    kill9(first);
    let second = node.ready_pid(first).await;
    assert_eq!(node.mode(), ComputeMode::ExclusiveProcess);
    node.client_gets_the_limits();
    p.stop().await;
    assert!(alive(second), "the restarted daemon outlives the plugin");

    // Dead at start (killed while the plugin was down): restarted.
    kill9(second);
    wait_for("the daemon to die", || !alive(second)).await;
    let p = node.plugin(&api);
    let k = register(node.dir()).await;
    let third = node.ready_pid(second).await;
    assert!(alive(third));
    assert_eq!(node.mode(), ComputeMode::ExclusiveProcess);
    node.client_gets_the_limits();

    unprepare(&k, c).await;
    assert!(!alive(third));
    assert!(!node.claim_dir().exists());
    p.stop().await;
}
