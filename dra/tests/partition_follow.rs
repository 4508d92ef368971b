//! The partitionable catalogue follows the node without a restart: on a simulated H100 80GB in
//! MIG mode with no instances (`gpuhook-sim build h100-mig-empty`), a MIG device another tool
//! makes while the plugin runs is subtracted from GPU 0's counter set and the placements
//! overlapping it are no longer offered; destroyed, they come back. A prepare running at the same
//! time succeeds, and the plugin's own MIG devices never change the slices (its placement stays
//! offered: its claim consumes it).
//!
//! Expectations: NVIDIA's MIG user guide, H100 80GB placements (1g.10gb at 0..6 one slice each,
//! 1g.20gb at 0, 2, 4, 6 two slices, 2g.20gb at 0, 2, 4); a 1g.10gb at slice 6 takes memory
//! slice 6, so 1g.10gb@6 and 1g.20gb@6 overlap it and nothing else does; the full GPU consumes
//! every slice, so it no longer fits (KEP-4815: a device fits when its consumption fits what is
//! left of the shared counters).
//!
//! Needs root, `cargo build -p gpuhook-sim --bins` and `cargo build -p gpuhook-mock-nvml`;
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

use std::path::Path;
use std::time::{Duration, Instant};

use apiserver::ApiServer;
use gpuhook_device_plugin::source::InventoryFrom;
use gpuhook_dra::rescan::Rescan;
use gpuhook_node::DiscoverOptions;
use part::{instances, mig_claim, published, sim_node, start};
use plugin::NODE;

/// Generous: the machine may be loaded.
const SETTLE: Duration = Duration::from_secs(60);

async fn settle<F: Fn() -> bool>(what: &str, f: F) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < SETTLE, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The placements overlapping memory slice 6 of GPU 0.
const AT_6: [&str; 2] = ["gpu-0-mig-1g10gb-19-6", "gpu-0-mig-1g20gb-15-6"];

/// Memory slice 6 of GPU 0's counter set is free, and the placements on it are offered.
fn slice_6_free(api: &ApiServer) -> bool {
    let (sets, names) = published(api);
    sets.first()
        .is_some_and(|s| s["counters"]["memory-slice-6"]["value"] == "1")
        && AT_6.iter().all(|n| names.contains(*n))
}

/// Memory slice 6 is taken from the set and nothing overlapping it is offered.
fn slice_6_taken(api: &ApiServer) -> bool {
    let (sets, names) = published(api);
    sets.first()
        .is_some_and(|s| s["counters"]["memory-slice-6"]["value"] == "0")
        && AT_6.iter().all(|n| !names.contains(*n))
}

fn generation(api: &ApiServer) -> i64 {
    api.slices()
        .iter()
        .filter_map(|s| s["spec"]["pool"]["generation"].as_i64())
        .max()
        .unwrap_or(0)
}

fn writes(api: &ApiServer) -> usize {
    let st = api.state.lock().unwrap();
    st.log.iter().filter(|(m, _)| m != "GET").count()
}

/// An admin's MIG tool on the node (its own NVML handle, as another process would have).
fn admin(root: &Path) -> gpuhook_dra::dynmig::Partitioner {
    gpuhook_dra::run::partitioner(&DiscoverOptions::for_root(root)).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitionable_slices_follow_mig_devices_made_by_others() {
    let dir = tempfile::tempdir().unwrap();
    let Some(root) = sim_node(dir.path(), "h100-mig-empty") else {
        return;
    };
    let api = ApiServer::start(NODE);
    let mut p = start(dir.path(), &api, &root);
    p.follow_repartitions(Rescan {
        from: InventoryFrom::Discover(DiscoverOptions::for_root(&root)),
        sys_root: dir.path().join("sys-root"),
        poll: Duration::from_millis(50),
    });
    settle("the first slices", || slice_6_free(&api)).await;
    let gen0 = generation(&api);

    // An admin makes a 1g.10gb at slice 6 while a claim's 2g.20gb at 0 is being prepared.
    let own = mig_claim(&api, "uid-own", "gpu-0-mig-2g20gb-14-0");
    let driver = p.driver.clone();
    let prepare = tokio::spawn(async move { driver.prepare(&own).await });
    let a = admin(&root);
    tokio::task::spawn_blocking(move || {
        a.with(|b| gpuhook_mig::create_instance(b, 0, "1g.10gb", Some(6)))
            .unwrap();
    })
    .await
    .unwrap();
    let prepared = prepare.await.unwrap();
    assert!(prepared.is_ok(), "{prepared:?}");
    assert_eq!(instances(&root), [(14, 0), (19, 6)]);

    settle("the admin's device subtracted", || slice_6_taken(&api)).await;
    assert!(generation(&api) > gen0, "a new pool generation");
    let (sets, names) = published(&api);
    // The claim's own device is not subtracted: its placement stays, its claim consumes it.
    assert!(names.contains("gpu-0-mig-2g20gb-14-0"), "{names:?}");
    assert_eq!(sets[0]["counters"]["memory-slice-0"]["value"], "1");
    assert_eq!(sets[0]["counters"]["memory-slice-5"]["value"], "1");
    assert!(api.state.lock().unwrap().refused.is_empty());

    // The plugin's own destroy (unprepare) moves the MIG directories but not the catalogue.
    let (w, g) = (writes(&api), generation(&api));
    p.driver.unprepare("uid-own").await.unwrap();
    assert_eq!(instances(&root), [(19, 6)]);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!((writes(&api), generation(&api)), (w, g), "no churn");
    assert!(slice_6_taken(&api));

    // The admin destroys its device: the placements come back.
    let gi = admin(&root)
        .with(|b| b.gpu(0))
        .unwrap()
        .instances
        .iter()
        .find(|i| i.placement.start == 6)
        .map(|i| i.id)
        .unwrap();
    admin(&root)
        .with(|b| gpuhook_mig::destroy_instance(b, 0, gi, &gpuhook_mig::NoHolders, false))
        .unwrap();
    settle("the placements given back", || slice_6_free(&api)).await;
    assert!(instances(&root).is_empty());
    assert!(api.state.lock().unwrap().refused.is_empty());
    p.stop().await;
}
