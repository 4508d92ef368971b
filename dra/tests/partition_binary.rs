//! Partitionable MIG end to end through the `gpuhook-dra-plugin` binary, as the DaemonSet runs it
//! (`--sharing partitionable-mig`), on a simulated H100 with MIG mode off, driven by the fake
//! kubelet over the real sockets and the validating fake API server: the full GPU and NVIDIA's
//! placements are published; a full-GPU claim gets the GPU with MIG mode left off; a placement
//! claim switches MIG mode on and creates its device; its unprepare destroys it and switches MIG
//! mode off (NVIDIA's `createMigDevice` / `maybeDisableMigMode`, `nvlib.go`).
//!
//! Needs root and `cargo build -p gpuhook-sim --bins` and `cargo build -p gpuhook-mock-nvml`;
//! skipped otherwise, a failure under GPUHOOK_REQUIRE_E2E=1.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "common/apiserver.rs"]
mod apiserver;
#[path = "common/kubelet.rs"]
mod kubelet;
#[path = "common/partition.rs"]
mod part;
#[path = "common/plugin.rs"]
mod plugin;
#[path = "common/sim.rs"]
mod sim;

use std::path::Path;
use std::process::{Child, Command, Stdio};

use apiserver::ApiServer;
use gpuhook_dra::api::{self, v1::DRAPluginClient};
use gpuhook_dra::testkit::claim;
use gpuhook_node::DiscoverOptions;
use part::{instances, published, sim_node};
use plugin::{specs, wait_for, NODE};
use tonic::transport::Channel;

/// The plugin process; killed on drop.
struct Plugin(Child);

impl Drop for Plugin {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(dir: &Path, root: &Path, api: &ApiServer) -> Plugin {
    let log = std::fs::File::create(dir.join("plugin.log")).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_gpuhook-dra-plugin"))
        .args(["--node-name", NODE, "--sharing", "partitionable-mig"])
        .args([
            "--no-health",
            "--mig-poll-ms",
            "100",
            "--claim-index-poll-ms",
            "0",
        ])
        .args(["--kube-api-url", &api.url, "--gpuhook-path", "/bin/false"])
        .arg("--driver-root")
        .arg(root)
        .arg("--cdi-root")
        .arg(dir.join("cdi"))
        .arg("--registry-dir")
        .arg(dir.join("plugins_registry"))
        .arg("--plugin-dir")
        .arg(dir.join("plugin"))
        .env("RUST_LOG", "info,gpuhook_dra=debug")
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    Plugin(child)
}

fn mig_mode(root: &Path) -> bool {
    let p = gpuhook_dra::run::partitioner(&DiscoverOptions::for_root(root)).unwrap();
    p.with(|b| b.gpu(0)).unwrap().mig.enabled()
}

/// Prepares claim `uid` over v1; its CDI device IDs, or the claim's error.
async fn prepare(v1: &mut DRAPluginClient<Channel>, uid: &str) -> Result<Vec<String>, String> {
    let req = api::NodePrepareResourcesRequest {
        claims: vec![kubelet::claim("ns", uid, uid)],
    };
    let r = v1.node_prepare_resources(req).await.unwrap().into_inner();
    let c = &r.claims[uid];
    if !c.error.is_empty() {
        return Err(c.error.clone());
    }
    Ok(c.devices
        .iter()
        .flat_map(|d| d.cdi_device_ids.clone())
        .collect())
}

async fn unprepare(v1: &mut DRAPluginClient<Channel>, uid: &str) {
    let req = api::NodeUnprepareResourcesRequest {
        claims: vec![kubelet::claim("ns", uid, uid)],
    };
    let r = v1.node_unprepare_resources(req).await.unwrap().into_inner();
    assert_eq!(r.claims[uid].error, "");
}

#[tokio::test]
async fn the_binary_serves_the_full_gpu_and_switches_mig_mode_for_placements() {
    let dir = tempfile::tempdir().unwrap();
    let Some(root) = sim_node(dir.path(), "h100-mig-empty") else {
        return;
    };
    let p = gpuhook_dra::run::partitioner(&DiscoverOptions::for_root(&root)).unwrap();
    assert!(!p.with(|b| b.set_mig_mode(0, false)).unwrap());
    drop(p);
    assert!(!mig_mode(&root));
    let api = ApiServer::start(NODE);
    let _plugin = spawn(dir.path(), &root, &api);
    let k = kubelet::register(&dir.path().join("plugins_registry"), "gpu.nvidia.com").await;
    let mut v1 = DRAPluginClient::new(k.channel.clone());
    wait_for("slices", || api.slices().len() == 2).await;
    let (sets, names) = published(&api);
    assert_eq!(sets[0]["name"], "gpu-0-counter-set");
    assert!(
        names.contains("gpu-0") && names.contains("gpu-0-mig-2g20gb-14-2"),
        "{names:?}"
    );
    assert!(api.state.lock().unwrap().refused.is_empty());
    let before = api.slices();

    api.add_claim(claim(
        "ns",
        "uid-g",
        "uid-g",
        NODE,
        &[("gpu", "gpu-0")],
        vec![],
    ));
    let ids = prepare(&mut v1, "uid-g").await.unwrap();
    assert_eq!(ids, ["k8s.gpu.nvidia.com/claim=uid-g-gpu-0"]);
    assert!(!mig_mode(&root), "MIG mode stays off for the full GPU");
    let spec = std::fs::read_to_string(&specs(dir.path())[0]).unwrap();
    assert!(spec.contains("/dev/nvidia0"), "{spec}");
    unprepare(&mut v1, "uid-g").await;

    let placement = "gpu-0-mig-2g20gb-14-2";
    api.add_claim(claim(
        "ns",
        "uid-m",
        "uid-m",
        NODE,
        &[("mig", placement)],
        vec![],
    ));
    let ids = prepare(&mut v1, "uid-m").await.unwrap();
    assert_eq!(ids, [format!("k8s.gpu.nvidia.com/claim=uid-m-{placement}")]);
    assert!(mig_mode(&root), "switched on for the placement");
    assert_eq!(instances(&root), [(14, 2)]);
    unprepare(&mut v1, "uid-m").await;
    assert!(instances(&root).is_empty());
    assert!(!mig_mode(&root), "switched off with its last MIG device");
    assert!(specs(dir.path()).is_empty());
    // The plugin's own switches and MIG devices moved the MIG capability directories: the
    // re-read that follows finds the same devices and publishes nothing (same slices, same pool
    // generation).
    let log = dir.path().join("plugin.log");
    wait_for("the re-read after the switches", || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("MIG capability change: same devices")
    })
    .await;
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.contains("node devices changed"), "{text}");
    assert_eq!(api.slices(), before);
}
