//! Health of a partitionable placement the plugin made a MIG device for: on a simulated H100
//! 80GB in MIG mode with no instances (`gpuhook-sim build h100-mig-empty`), with the NVML health
//! monitor and the MIG directory watch running, a claim for the 1g.10gb placement at slice 0 is
//! prepared (the plugin creates the MIG device), then a critical Xid of that MIG device is raised.
//!
//! Expected (NVIDIA's health semantics, `shared/reference/kdp-facts.md` and the device plugin's
//! `health.rs`: a critical Xid attributed to a GPU/compute instance marks the MIG device of those
//! ids, nothing else of its GPU): the claim's placement is tainted in the slices and Unhealthy on
//! the kubelet's health stream; no other placement of the GPU is tainted. After unprepare (the
//! MIG device is destroyed) the placement is offered untainted again: the fault was the made
//! device's, and a new claim gets a new device.
//!
//! The Xid goes through the mock NVML's event file (`xid <MIG uuid> <xid>`: raised on the parent
//! GPU with the device's GI/CI ids, as NVML does). The monitor learns the new MIG device when the
//! MIG directory watch re-reads the node; until then an event for its ids marks nothing (the
//! device plugin's `watch.rs`), so the Xid is raised again until the taint shows.
//! Needs root, `cargo build -p gpuhook-sim --bins` and `cargo build -p gpuhook-mock-nvml`;
//! skipped otherwise, a failure under GPUHOOK_REQUIRE_E2E=1.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "common/apiserver.rs"]
mod apiserver;
#[path = "common/health.rs"]
mod health;
#[path = "common/kubelet.rs"]
mod kubelet;
#[path = "common/partition.rs"]
mod part;
#[path = "common/plugin.rs"]
mod plugin;
#[path = "common/sim.rs"]
mod sim;

use std::path::Path;
use std::time::{Duration, Instant};

use apiserver::ApiServer;
use gpuhook_device_plugin::source::InventoryFrom;
use gpuhook_dra::api::{self, health::DRAResourceHealthClient};
use gpuhook_dra::rescan::Rescan;
use gpuhook_node::DiscoverOptions;
use health::{devices, inject, stream_says, SETTLE};
use part::{mig_claim, sim_node};
use plugin::{plugin_node, NODE};

const PLACEMENT: &str = "gpu-0-mig-1g10gb-19-0";

/// Names of the published devices that carry the unhealthy taint.
fn tainted(api: &ApiServer) -> Vec<String> {
    devices(api)
        .iter()
        .filter(|d| d["taints"][0]["key"] == "gpu.nvidia.com/unhealthy")
        .map(|d| d["name"].as_str().unwrap().to_string())
        .collect()
}

fn offered(api: &ApiServer, name: &str) -> bool {
    devices(api).iter().any(|d| d["name"] == name)
}

/// The UUID of the one MIG device on GPU 0, read through NVML as another tool would.
fn made_uuid(root: &Path) -> String {
    let p = gpuhook_dra::run::partitioner(&DiscoverOptions::for_root(root)).unwrap();
    let gpu = p.with(|b| b.gpu(0)).unwrap();
    assert_eq!(gpu.instances.len(), 1, "{:?}", gpu.instances);
    gpu.instances[0].cis[0].uuid.clone().expect("a MIG UUID")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_xid_of_a_made_mig_device_taints_its_placement_only() {
    let dir = tempfile::tempdir().unwrap();
    let Some(root) = sim_node(dir.path(), "h100-mig-empty") else {
        return;
    };
    let api = ApiServer::start(NODE);
    let d = DiscoverOptions::for_root(&root);
    let inv = gpuhook_node::discover(&d).unwrap().inventory;
    let nvml = Some((root.clone(), None));
    let mut p = plugin_node(
        dir.path(),
        &api,
        Path::new("/bin/false"),
        nvml,
        inv,
        Some(d.clone()),
    );
    p.follow_repartitions(Rescan {
        from: InventoryFrom::Discover(d),
        sys_root: dir.path().join("sys-root"),
        poll: Duration::from_millis(50),
    });
    let start = Instant::now();
    while !offered(&api, PLACEMENT) {
        assert!(start.elapsed() < SETTLE, "the first slices");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let claim = mig_claim(&api, "uid-1", PLACEMENT);
    let prepared = p.driver.prepare(&claim).await;
    assert!(prepared.is_ok(), "{prepared:?}");
    let mig = made_uuid(&root);
    assert!(tainted(&api).is_empty(), "{:?}", tainted(&api));

    let k = kubelet::register(&dir.path().join("plugins_registry"), "gpu.nvidia.com").await;
    let mut health = DRAResourceHealthClient::new(k.channel.clone());
    let mut stream = health
        .node_watch_resources(api::NodeWatchResourcesRequest {})
        .await
        .unwrap()
        .into_inner();
    stream_says(&mut stream, PLACEMENT, api::HealthStatus::Healthy).await;

    let start = Instant::now();
    while tainted(&api).is_empty() {
        assert!(
            start.elapsed() < SETTLE,
            "the made device's Xid never tainted its placement"
        );
        inject(&root, &format!("xid {mig} 48"));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(tainted(&api), [PLACEMENT], "that placement, nothing else");
    let message = stream_says(&mut stream, PLACEMENT, api::HealthStatus::Unhealthy).await;
    assert!(message.contains("48"), "{message}");

    p.driver.unprepare("uid-1").await.unwrap();
    let start = Instant::now();
    while !(tainted(&api).is_empty() && offered(&api, PLACEMENT)) {
        assert!(
            start.elapsed() < SETTLE,
            "placement not offered untainted: {:?}",
            tainted(&api)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(api.state.lock().unwrap().refused.is_empty());
    p.stop().await;
}
