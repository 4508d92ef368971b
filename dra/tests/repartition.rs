//! ResourceSlices follow a MIG re-partition of static MIG devices without a plugin restart: a
//! simulated node with two A100-SXM4-80GB in MIG mode (`gpuhook-sim build a100-mig-mixed`:
//! GPU 0 = 3g.40gb + 2x 2g.20gb, GPU 1 = 7x 1g.10gb) is re-partitioned through gpuhook-mig
//! (the library `gpuhook-mig-parted apply` runs) while the plugin runs; the slices the
//! validating fake API server holds change to the new layout with a new pool generation, and a
//! device prepared for a claim that the re-partition removed stays published, tainted, until the
//! claim is unprepared (`layout.rs`). Nothing is written to the API server while nothing changes.
//!
//! Needs root, `cargo build -p gpuhook-sim --bins` and `cargo build -p gpuhook-mock-nvml`; skipped otherwise, a
//! failure under GPUHOOK_REQUIRE_E2E=1.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "common/apiserver.rs"]
mod apiserver;
#[path = "common/plugin.rs"]
mod plugin;
#[path = "common/sim.rs"]
mod sim;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use apiserver::ApiServer;
use gpuhook_device_plugin::source::InventoryFrom;
use gpuhook_dra::driver::ClaimRef;
use gpuhook_dra::rescan::Rescan;
use gpuhook_dra::testkit::claim;
use gpuhook_node::DiscoverOptions;
use plugin::{plugin_node, wait_for, NODE};
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

fn devices(api: &ApiServer) -> Vec<Value> {
    api.slices()
        .iter()
        .filter_map(|s| s["spec"]["devices"].as_array())
        .flatten()
        .cloned()
        .collect()
}

fn attr(d: &Value, k: &str) -> String {
    d["attributes"][k]["string"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// (parent GPU UUID, profile) → how many MIG devices the slices publish untainted.
fn mig_layout(api: &ApiServer) -> BTreeMap<(String, String), usize> {
    let mut m = BTreeMap::new();
    for d in devices(api) {
        if attr(&d, "type") == "mig" && d.get("taints").is_none() {
            *m.entry((attr(&d, "parentUUID"), attr(&d, "profile")))
                .or_default() += 1;
        }
    }
    m
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

fn want(pairs: &[(&str, &str, usize)]) -> BTreeMap<(String, String), usize> {
    pairs
        .iter()
        .map(|(g, p, n)| ((g.to_string(), p.to_string()), *n))
        .collect()
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

#[tokio::test]
async fn slices_follow_a_mig_repartition_without_restart() {
    let dir = tempfile::tempdir().unwrap();
    let Some(root) = sim::sim_node(dir.path(), "a100-mig-mixed", "repartition") else {
        return;
    };
    let api = ApiServer::start(NODE);
    let d = DiscoverOptions::for_root(&root);
    let inv = gpuhook_node::discover(&d).unwrap().inventory;
    let (g0, g1) = (inv.gpus[0].uuid.clone(), inv.gpus[1].uuid.clone());
    let mut p = plugin_node(dir.path(), &api, Path::new("/bin/false"), None, inv, None);
    p.follow_repartitions(Rescan {
        from: InventoryFrom::Discover(d),
        sys_root: dir.path().join("sys-root"),
        poll: Duration::from_millis(50),
    });
    let before = want(&[
        (&g0, "3g.40gb", 1),
        (&g0, "2g.20gb", 2),
        (&g1, "1g.10gb", 7),
    ]);
    wait_for("the first slices", || mig_layout(&api) == before).await;
    let gen0 = generation(&api);

    // Nothing changes: several polls later nothing was written.
    let w = writes(&api);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(writes(&api), w, "no change, no write");

    // A claim holds GPU 0's 3g.40gb device.
    let held = devices(&api)
        .into_iter()
        .find(|d| attr(d, "profile") == "3g.40gb")
        .unwrap();
    let held_name = held["name"].as_str().unwrap().to_string();
    api.add_claim(claim(
        "ns",
        "c1",
        "uid-1",
        NODE,
        &[("mig", &held_name)],
        vec![],
    ));
    let c = ClaimRef {
        namespace: "ns".into(),
        name: "c1".into(),
        uid: "uid-1".into(),
    };
    p.driver.prepare(&c).await.unwrap();

    repartition(&root);
    let after = want(&[(&g0, "1g.10gb", 7), (&g1, "3g.40gb", 2)]);
    wait_for("the new layout in the slices", || mig_layout(&api) == after).await;
    assert!(generation(&api) > gen0, "a new pool generation");
    let all = devices(&api);
    let kept = all
        .iter()
        .find(|d| d["name"] == held_name.as_str())
        .unwrap();
    assert_eq!(kept["taints"][0]["value"], "RemovedWhilePrepared", "{kept}");
    assert_eq!(kept["taints"][0]["effect"], "NoSchedule");
    assert!(api.state.lock().unwrap().refused.is_empty());

    // Unprepared: the removed device leaves the slices; the new layout stays.
    let gen1 = generation(&api);
    p.driver.unprepare("uid-1").await.unwrap();
    wait_for("the removed device withdrawn", || {
        !devices(&api)
            .iter()
            .any(|d| d["name"] == held_name.as_str())
    })
    .await;
    assert_eq!(mig_layout(&api), after);
    assert!(generation(&api) > gen1);
    assert!(api.state.lock().unwrap().refused.is_empty());
    p.stop().await;
}
