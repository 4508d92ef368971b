//! Device health follows a MIG re-partition: the plugin runs with the NVML health monitor on a
//! simulated node with two A100-SXM4-80GB in MIG mode (`gpuhook-sim build a100-mig-mixed`: GPU 0
//! = 3g.40gb + 2x 2g.20gb, GPU 1 = 7x 1g.10gb), GPU 1 has raised a critical Xid, and the node is
//! re-partitioned through gpuhook-mig while the plugin runs. Expected (NVIDIA's health semantics,
//! `shared/reference/kdp-facts.md` and the device plugin's `health.rs`: a critical Xid attributed
//! to a GPU/compute instance marks the MIG device of those ids, one of the whole GPU marks the GPU
//! and everything on it):
//! - a critical Xid of a MIG device that exists only after the re-partition taints that device
//!   in the slice and turns it Unhealthy on the kubelet's health stream, and nothing else of its
//!   GPU;
//! - GPU 1 stays down: its new MIG devices are tainted too (a new layout does not heal a GPU).
//!
//! The Xids are injected through the mock NVML's event file (`<lib dir>/gpuhook-sim-state/events`):
//! `xid <MIG uuid> <xid>` is raised on the parent GPU with the device's GI/CI ids, as NVML does.
//! Needs root, `cargo build -p gpuhook-sim --bins` and `cargo build -p gpuhook-mock-nvml`;
//! skipped otherwise, a failure under GPUHOOK_REQUIRE_E2E=1.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "common/apiserver.rs"]
mod apiserver;
#[path = "common/health.rs"]
mod health;
#[path = "common/kubelet.rs"]
mod kubelet;
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
use plugin::{plugin_node, NODE};
use serde_json::Value;

/// mig-parted config v1: GPU 0 → seven 1g.10gb, GPU 1 → two 3g.40gb.
const LAYOUT: &str = r#"version: v1
mig-configs:
  repartitioned:
    - devices: [0]
      mig-enabled: true
      mig-devices:
        "1g.10gb": 7
    - devices: [1]
      mig-enabled: true
      mig-devices:
        "3g.40gb": 2
"#;

async fn settle<F: Fn() -> bool>(what: &str, f: F) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < SETTLE, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn attr(d: &Value, k: &str) -> String {
    d["attributes"][k]["string"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn tainted(d: &Value) -> bool {
    d["taints"][0]["key"] == "gpu.nvidia.com/unhealthy"
}

/// The published MIG devices of GPU `parent` as (uuid, profile, tainted).
fn migs_of(api: &ApiServer, parent: &str) -> Vec<(String, String, bool)> {
    let mut v: Vec<_> = devices(api)
        .iter()
        .filter(|d| attr(d, "type") == "mig" && attr(d, "parentUUID") == parent)
        .map(|d| (attr(d, "uuid"), attr(d, "profile"), tainted(d)))
        .collect();
    v.sort();
    v
}

fn repartition(root: &Path) {
    let file = gpuhook_mig::MigConfigFile::parse(LAYOUT.as_bytes(), "layout.yaml").unwrap();
    let entries = file.config("repartitioned").unwrap();
    let p = gpuhook_dra::run::partitioner(&DiscoverOptions::for_root(root)).unwrap();
    let out = p
        .with(|b| {
            gpuhook_mig::apply(
                b,
                entries,
                &gpuhook_mig::NoHolders,
                gpuhook_mig::ApplyOptions::default(),
            )
        })
        .unwrap();
    assert!(out.failed().is_empty() && !out.pending(), "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_follows_a_mig_repartition() {
    let dir = tempfile::tempdir().unwrap();
    let Some(root) = sim::sim_node(dir.path(), "a100-mig-mixed", "repartition_health") else {
        return;
    };
    let api = ApiServer::start(NODE);
    let d = DiscoverOptions::for_root(&root);
    let inv = gpuhook_node::discover(&d).unwrap().inventory;
    let (g0, g1) = (inv.gpus[0].uuid.clone(), inv.gpus[1].uuid.clone());
    let nvml = Some((root.clone(), None));
    let mut p = plugin_node(dir.path(), &api, Path::new("/bin/false"), nvml, inv, None);
    p.follow_repartitions(Rescan {
        from: InventoryFrom::Discover(d),
        sys_root: dir.path().join("sys-root"),
        poll: Duration::from_millis(50),
    });
    settle("the first slices", || migs_of(&api, &g1).len() == 7).await;
    let before: Vec<String> = migs_of(&api, &g0).into_iter().map(|m| m.0).collect();

    // GPU 1 fails as a whole: every device on it is tainted.
    inject(&root, &format!("xid {g1} 48"));
    settle("GPU 1's devices tainted", || {
        migs_of(&api, &g1).iter().all(|m| m.2)
    })
    .await;

    repartition(&root);
    settle("the new layout", || {
        let (a, b) = (migs_of(&api, &g0), migs_of(&api, &g1));
        a.len() == 7 && a.iter().all(|m| m.1 == "1g.10gb") && b.len() == 2
    })
    .await;
    // GPU 1 is still down: its new MIG devices are tainted.
    assert!(
        migs_of(&api, &g1).iter().all(|m| m.2),
        "{:?}",
        migs_of(&api, &g1)
    );
    let new = migs_of(&api, &g0);
    assert!(
        new.iter().all(|m| !m.2 && !before.contains(&m.0)),
        "{new:?}"
    );

    let k = kubelet::register(&dir.path().join("plugins_registry"), "gpu.nvidia.com").await;
    let mut health = DRAResourceHealthClient::new(k.channel.clone());
    let mut stream = health
        .node_watch_resources(api::NodeWatchResourcesRequest {})
        .await
        .unwrap()
        .into_inner();
    let target = new[3].0.clone();
    let name = devices(&api)
        .iter()
        .find(|d| attr(d, "uuid") == target)
        .map(|d| d["name"].as_str().unwrap().to_string())
        .unwrap();
    stream_says(&mut stream, &name, api::HealthStatus::Healthy).await;

    // A critical Xid of a MIG device made by the re-partition: that device, and only it.
    inject(&root, &format!("xid {target} 48"));
    settle("the new MIG device tainted", || {
        migs_of(&api, &g0).iter().any(|m| m.0 == target && m.2)
    })
    .await;
    let after = migs_of(&api, &g0);
    assert_eq!(after.iter().filter(|m| m.2).count(), 1, "{after:?}");
    let message = stream_says(&mut stream, &name, api::HealthStatus::Unhealthy).await;
    assert!(message.contains("48"), "{message}");
    assert!(api.state.lock().unwrap().refused.is_empty());
    p.stop().await;
}
