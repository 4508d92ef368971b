//! Partitionable MIG devices next to MIG devices this plugin did not make: those made by the MIG
//! manager or an admin are subtracted from the counters and never destroyed, and claims deleted
//! while the plugin was down have their MIG devices destroyed at the next start.
//!
//! Needs root and `cargo build -p gpuhook-sim --bins` and `cargo build -p gpuhook-mock-nvml`;
//! skipped otherwise, a failure under GPUHOOK_REQUIRE_E2E=1.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "common/apiserver.rs"]
mod apiserver;
#[path = "common/partition.rs"]
mod part;
#[path = "common/plugin.rs"]
mod plugin;
#[path = "common/sim.rs"]
mod sim;

use std::collections::BTreeSet;

use apiserver::ApiServer;
use gpuhook_node::DiscoverOptions;
use part::{instances, instances_of, mig_claim, published, sim_node, start};
use plugin::{specs, wait_for, NODE};

/// An A100 node whose GPUs already hold MIG devices made outside the driver (GPU 0: 3g.40gb +
/// 2x 2g.20gb, GPU 1: 7x 1g.10gb): their slices are taken from the counter sets and no placement
/// overlapping them is offered; a claim naming one fails alone and the devices are left alone.
#[tokio::test]
async fn a100_devices_made_by_others_are_subtracted_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    let Some(root) = sim_node(dir.path(), "a100-mig-mixed") else {
        return;
    };
    let api = ApiServer::start(NODE);
    let p = start(dir.path(), &api, &root);
    // Only the counter sets: the placements overlap the devices, and an A100 in MIG mode offers
    // no full GPU (it cannot leave MIG mode without a reset: NVIDIA's
    // `GetPerGpuAllocatableDevices`).
    wait_for("slices", || api.slices().len() == 1).await;
    let (sets, names) = published(&api);
    assert_eq!(sets.len(), 2);
    // GPU 1: slices 0..7 held, slice 7 free but no placement fits it alone on a 1g.10gb grid
    // (1g.20gb at 6 overlaps slice 6): nothing offered.
    assert_eq!(sets[1]["counters"]["memory-slice-0"]["value"], "0");
    assert_eq!(sets[1]["counters"]["memory-slice-7"]["value"], "1");
    assert_eq!(sets[1]["counters"]["compute-slices"]["value"], "0");
    assert_eq!(sets[0]["counters"]["compute-slices"]["value"], "0");
    assert_eq!(names, BTreeSet::new());
    assert!(api.state.lock().unwrap().refused.is_empty());
    let before = instances_of(&root, 1);
    assert_eq!(before.len(), 7, "seven 1g.10gb on GPU 1");
    let c = mig_claim(&api, "uid-a", "gpu-1-mig-1g10gb-19-3");
    let err = p.driver.prepare(&c).await.unwrap_err().to_string();
    assert!(err.contains("gpu-1-mig-1g10gb-19-3"), "{err}");
    p.driver.unprepare("uid-a").await.unwrap();
    assert_eq!(instances_of(&root, 1), before);
    assert!(specs(dir.path()).is_empty());
    p.stop().await;
}

/// A claim deleted while the plugin was down has its MIG device destroyed at the next start;
/// a prepared claim that still exists keeps its device (still offered: its claim holds it), and
/// a MIG device an admin made meanwhile is never destroyed and its placements are not offered.
#[tokio::test]
async fn claims_gone_while_down_are_swept_and_others_devices_kept() {
    let dir = tempfile::tempdir().unwrap();
    let Some(root) = sim_node(dir.path(), "h100-mig-empty") else {
        return;
    };
    let api = ApiServer::start(NODE);
    let p = start(dir.path(), &api, &root);
    let gone = mig_claim(&api, "uid-g", "gpu-0-mig-2g20gb-14-0");
    let kept = mig_claim(&api, "uid-k", "gpu-0-mig-1g10gb-19-4");
    p.driver.prepare(&gone).await.unwrap();
    p.driver.prepare(&kept).await.unwrap();
    p.stop().await;
    api.state
        .lock()
        .unwrap()
        .claims
        .remove(&("ns".to_string(), "uid-g".to_string()));
    let admin = gpuhook_dra::run::partitioner(&DiscoverOptions::for_root(&root)).unwrap();
    admin
        .with(|b| gpuhook_mig::create_instance(b, 0, "1g.10gb", Some(6)))
        .unwrap();
    assert_eq!(instances(&root), [(14, 0), (19, 4), (19, 6)]);
    api.state.lock().unwrap().slices.clear();

    let p = start(dir.path(), &api, &root);
    let root2 = root.clone();
    wait_for("the gone claim's device destroyed", move || {
        instances(&root2) == [(19, 4), (19, 6)]
    })
    .await;
    wait_for("slices", || api.slices().len() == 2).await;
    let (sets, names) = published(&api);
    assert_eq!(sets[0]["counters"]["memory-slice-6"]["value"], "0");
    assert_eq!(sets[0]["counters"]["memory-slice-4"]["value"], "1");
    assert!(
        names.contains("gpu-0-mig-1g10gb-19-4"),
        "the kept claim's own"
    );
    assert!(names.contains("gpu-0-mig-2g20gb-14-0"), "free again");
    for n in ["gpu-0-mig-1g10gb-19-6", "gpu-0-mig-1g20gb-15-6"] {
        assert!(!names.contains(n), "{n} overlaps the admin's device");
    }
    p.driver.unprepare("uid-k").await.unwrap();
    assert_eq!(instances(&root), [(19, 6)], "the admin's device is kept");
    p.stop().await;
}
