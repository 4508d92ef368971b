//! Partitionable MIG devices (KEP-4815) on a simulated H100 in MIG mode with no instances
//! (`gpuhook-sim build h100-mig-empty`, mock NVML with NVIDIA's placement tables): the slices
//! carry the GPU's counters and every placement of NVIDIA's MIG user guide table ("Supported MIG
//! Profiles", H100 80GB), prepare creates exactly the allocated placement, unprepare destroys
//! it, a taken placement fails alone, and a restart between create and checkpoint converges.
//!
//! Needs root (the node has device nodes) and `cargo build -p gpuhook-sim --bins`
//! and `cargo build -p gpuhook-mock-nvml`; skipped otherwise, a failure under GPUHOOK_REQUIRE_E2E=1.
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
use std::path::{Path, PathBuf};

use apiserver::ApiServer;
use gpuhook_dra::driver::ClaimRef;
use gpuhook_dra::testkit::claim;
use gpuhook_node::DiscoverOptions;
use part::{instances, mig_claim, sim_node, start};
use plugin::{specs, wait_for, NODE};
use serde_json::Value;

/// The mock NVML's switch that makes GPU 0 busy (`<lib dir>/gpuhook-sim-state/in-use-<uuid>`).
fn in_use_switch(root: &Path) -> PathBuf {
    let loc = gpuhook_node::NvmlLocation::locate(root, None).unwrap();
    let inv = gpuhook_node::discover(&DiscoverOptions::for_root(root))
        .unwrap()
        .inventory;
    loc.path()
        .parent()
        .unwrap()
        .join("gpuhook-sim-state")
        .join(format!("in-use-{}", inv.gpus[0].uuid))
}

/// NVIDIA's H100 80GB table (the A100 80GB's is the same): (profile, id, starts) with sizes 1, 2, 2, 4, 4, 8.
const GUIDE: &[(&str, u32, &[u32])] = &[
    ("1g10gb", 19, &[0, 1, 2, 3, 4, 5, 6]),
    ("1g10gbme", 20, &[0, 1, 2, 3, 4, 5, 6]),
    ("1g20gb", 15, &[0, 2, 4, 6]),
    ("2g20gb", 14, &[0, 2, 4]),
    ("3g40gb", 9, &[0, 4]),
    ("4g40gb", 5, &[0]),
    ("7g80gb", 0, &[0]),
];

/// The counters of a GPU's set: its memory slices, compute slices and NVIDIA's capacities.
fn counter_names() -> BTreeSet<String> {
    let mut want: BTreeSet<String> = (0..8).map(|i| format!("memory-slice-{i}")).collect();
    for n in [
        "compute-slices",
        "multiprocessors",
        "copy-engines",
        "decoders",
        "encoders",
        "jpeg-engines",
        "ofa-engines",
        "memory",
    ] {
        want.insert(n.into());
    }
    want
}

fn check_slices(api: &ApiServer) {
    check_gpu_slices(api, &[0]);
}

/// The counter sets and placements of GPUs `minors`, nothing else.
fn check_gpu_slices(api: &ApiServer, minors: &[u32]) {
    let slices = api.slices();
    let sets: Vec<&Value> = slices
        .iter()
        .filter_map(|s| s["spec"]["sharedCounters"].as_array())
        .flatten()
        .collect();
    assert_eq!(sets.len(), minors.len(), "{slices:?}");
    assert_eq!(sets[0]["name"], "gpu-0-counter-set");
    let counters = sets[0]["counters"].as_object().unwrap();
    assert_eq!(
        counters.keys().cloned().collect::<BTreeSet<_>>(),
        counter_names()
    );
    assert_eq!(counters["compute-slices"]["value"], "7");
    // NVIDIA's rule: the GPU's counter is the largest of any profile (the 7g's SMs, the one OFA).
    assert_eq!(counters["multiprocessors"]["value"], "112");
    assert_eq!(counters["ofa-engines"]["value"], "1");
    let devices: Vec<&Value> = slices
        .iter()
        .filter_map(|s| s["spec"]["devices"].as_array())
        .flatten()
        .collect();
    let names: BTreeSet<String> = devices
        .iter()
        .map(|d| d["name"].as_str().unwrap().to_string())
        .collect();
    let mut expected = BTreeSet::new();
    for m in minors {
        for (p, id, starts) in GUIDE {
            expected.extend(starts.iter().map(|s| format!("gpu-{m}-mig-{p}-{id}-{s}")));
        }
        expected.insert(format!("gpu-{m}"));
    }
    assert_eq!(names, expected);
    let d = devices
        .iter()
        .find(|d| d["name"] == "gpu-0-mig-1g20gb-15-2")
        .unwrap();
    let c = &d["consumesCounters"][0];
    assert_eq!(c["counterSet"], "gpu-0-counter-set");
    let keys: BTreeSet<&String> = c["counters"].as_object().unwrap().keys().collect();
    assert_eq!(keys.len(), 3 + 7, "{c}");
    assert_eq!(c["counters"]["multiprocessors"]["value"], "16");
    assert_eq!(d["capacity"]["copyEngines"]["value"], "1");
    assert_eq!(c["counters"]["memory-slice-2"]["value"], "1");
    assert_eq!(c["counters"]["memory-slice-3"]["value"], "1");
    assert_eq!(c["counters"]["compute-slices"]["value"], "1");
    assert!(api.state.lock().unwrap().refused.is_empty());
}

#[tokio::test]
async fn h100_placements_are_created_at_prepare_and_destroyed_at_unprepare() {
    let dir = tempfile::tempdir().unwrap();
    let Some(root) = sim_node(dir.path(), "h100-mig-empty") else {
        return;
    };
    let api = ApiServer::start(NODE);
    let p = start(dir.path(), &api, &root);
    wait_for("slices", || api.slices().len() == 2).await;
    check_slices(&api);
    assert!(instances(&root).is_empty());

    // MPS on a device made at prepare is refused (as NVIDIA's DynamicMIG), nothing made.
    let cfg = gpuhook_dra::testkit::opaque(
        &["mig"],
        serde_json::json!({"apiVersion": "resource.nvidia.com/v1beta1", "kind": "MigDeviceConfig",
                           "sharing": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 50}}}),
    );
    api.add_claim(claim(
        "ns",
        "uid-mps",
        "uid-mps",
        NODE,
        &[("mig", "gpu-0-mig-1g10gb-19-0")],
        vec![cfg],
    ));
    let mps = ClaimRef {
        namespace: "ns".into(),
        name: "uid-mps".into(),
        uid: "uid-mps".into(),
    };
    let err = p.driver.prepare(&mps).await.unwrap_err().to_string();
    assert!(err.contains("MPS sharing is not supported"), "{err}");
    assert!(instances(&root).is_empty());

    let c = mig_claim(&api, "uid-m", "gpu-0-mig-3g40gb-9-4");
    let devs = p.driver.prepare(&c).await.unwrap();
    assert_eq!(
        devs[0].cdi_device_ids,
        ["k8s.gpu.nvidia.com/claim=uid-m-gpu-0-mig-3g40gb-9-4"]
    );
    assert_eq!(instances(&root), [(9, 4)]);
    let spec = std::fs::read_to_string(&specs(dir.path())[0]).unwrap();
    assert!(spec.contains("nvidia-caps/nvidia-cap"), "{spec}");
    // Idempotent: the same answer, no second instance.
    assert_eq!(p.driver.prepare(&c).await.unwrap(), devs);
    assert_eq!(instances(&root), [(9, 4)]);

    // A placement already taken (the whole GPU overlaps it): this claim fails alone.
    let full = mig_claim(&api, "uid-f", "gpu-0-mig-7g80gb-0-0");
    let err = p.driver.prepare(&full).await.unwrap_err().to_string();
    assert!(err.contains("already taken"), "{err}");
    assert_eq!(instances(&root), [(9, 4)]);
    assert_eq!(specs(dir.path()).len(), 1);

    // A process holds the GPU (the mock's `in-use-<uuid>` switch: NVML answers IN_USE): the
    // MIG device is kept and unprepare fails, to be retried by the kubelet.
    let held = in_use_switch(&root);
    std::fs::write(&held, "").unwrap();
    let err = p.driver.unprepare("uid-m").await.unwrap_err().to_string();
    assert!(err.contains("MIG device"), "{err}");
    assert_eq!(instances(&root), [(9, 4)]);
    std::fs::remove_file(&held).unwrap();
    p.driver.unprepare("uid-m").await.unwrap();
    p.driver.unprepare("uid-m").await.unwrap();
    assert!(instances(&root).is_empty());
    assert!(specs(dir.path()).is_empty());
    // The refused claim can now be prepared and left: nothing of it stayed behind before.
    p.driver.prepare(&full).await.unwrap();
    assert_eq!(instances(&root), [(0, 0)]);
    p.driver.unprepare("uid-f").await.unwrap();
    assert!(instances(&root).is_empty());
    p.stop().await;
}

/// A crash after NVML created the instance but before its ids reached the checkpoint.
#[tokio::test]
async fn a_restart_between_create_and_checkpoint_converges() {
    let dir = tempfile::tempdir().unwrap();
    let Some(root) = sim_node(dir.path(), "h100-mig-empty") else {
        return;
    };
    let api = ApiServer::start(NODE);
    let p = start(dir.path(), &api, &root);
    let c = mig_claim(&api, "uid-c", "gpu-0-mig-2g20gb-14-2");
    p.driver.prepare(&c).await.unwrap();
    p.stop().await;
    assert_eq!(instances(&root), [(14, 2)]);
    let cp_path = dir.path().join("plugin/checkpoint.json");
    let mut cp: Value = serde_json::from_slice(&std::fs::read(&cp_path).unwrap()).unwrap();
    let e = &mut cp["claims"]["uid-c"];
    e["state"] = "PrepareStarted".into();
    let rec = e["mig"][0].as_object_mut().unwrap();
    assert_eq!(rec["creating"], true);
    for k in ["gpuInstance", "computeInstance", "uuid"] {
        assert!(rec.remove(k).is_some(), "{k}");
    }
    std::fs::write(&cp_path, serde_json::to_vec(&cp).unwrap()).unwrap();
    std::fs::remove_dir_all(dir.path().join("cdi")).unwrap();

    let p = start(dir.path(), &api, &root);
    p.driver.prepare(&c).await.unwrap();
    assert_eq!(instances(&root), [(14, 2)], "rolled back and made once");
    p.driver.unprepare("uid-c").await.unwrap();
    assert!(instances(&root).is_empty());
    p.stop().await;
}

/// The fake API server refuses what KEP-4815's validation refuses (dra-facts §3), so the slices
/// above passing it means something.
#[test]
fn the_fake_api_server_refuses_counters_beyond_the_limits() {
    let set = |i: usize| serde_json::json!({"name": format!("gpu-{i}-counter-set"), "counters": {"memory-slice-0": {"value": "1"}}});
    let slice = |spec: Value| {
        let mut s = serde_json::json!({"metadata": {"name": "node-a-gpu.nvidia.com-0"},
            "spec": {"driver": "gpu.nvidia.com", "nodeName": NODE,
                     "pool": {"name": NODE, "generation": 1, "resourceSliceCount": 1}}});
        for (k, v) in spec.as_object().unwrap() {
            s["spec"][k] = v.clone();
        }
        s
    };
    let ok = slice(serde_json::json!({"sharedCounters": (0..8).map(set).collect::<Vec<_>>()}));
    assert!(apiserver::validate_slice(&ok, NODE).is_ok());
    let nine = slice(serde_json::json!({"sharedCounters": (0..9).map(set).collect::<Vec<_>>()}));
    let dev =
        |consumes: Vec<Value>| serde_json::json!({"name": "gpu-0", "consumesCounters": consumes});
    let both = slice(serde_json::json!({"sharedCounters": [set(0)], "devices": [dev(vec![])]}));
    let entry = serde_json::json!({"counterSet": "gpu-0-counter-set", "counters": {"memory-slice-0": {"value": "1"}}});
    let three = slice(serde_json::json!({"devices": [dev(vec![entry.clone(); 3])]}));
    let many: serde_json::Map<String, Value> = (0..33)
        .map(|i| {
            (
                format!("memory-slice-{i}"),
                serde_json::json!({"value": "1"}),
            )
        })
        .collect();
    let wide = slice(
        serde_json::json!({"sharedCounters": [{"name": "gpu-0-counter-set", "counters": many}]}),
    );
    let bad_name = slice(
        serde_json::json!({"devices": [dev(vec![serde_json::json!({"counterSet": "Gpu_0", "counters": {"a": {"value": "1"}}})])]}),
    );
    for bad in [nine, both, three, wide, bad_name] {
        assert_eq!(
            apiserver::validate_slice(&bad, NODE).unwrap_err().0,
            422,
            "{bad}"
        );
    }
    let devs: Vec<Value> = (0..65)
        .map(|i| serde_json::json!({"name": format!("d-{i}"), "consumesCounters": [entry.clone()]}))
        .collect();
    let crowded = slice(serde_json::json!({ "devices": devs }));
    assert_eq!(
        apiserver::validate_slice(&crowded, NODE).unwrap_err().0,
        422
    );
}
