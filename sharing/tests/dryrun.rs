//! The dry run's JSON: what a node would advertise, or the config errors (no kubelet needed).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test crate: a panic is the failure report

mod common;

use gpuhook_sharing::dry_run;
use serde_json::Value;

const L20: &str = "version: v1\nsharing:\n  timeSlicing:\n    resources:\n      - {name: nvidia.com/gpu, replicas: 8}\nflags: {notAFlag: 1}\n";

fn json(d: &gpuhook_sharing::DryRun) -> Value {
    serde_json::from_str(&d.to_json()).unwrap()
}

#[test]
fn a_good_config_prints_resources_device_ids_labels_and_warnings() {
    let t = tempfile::tempdir().unwrap();
    std::fs::write(t.path().join("l20"), L20).unwrap();
    std::fs::write(t.path().join("broken"), "version: v3\n").unwrap();
    let inv = common::node("l20");
    let d = dry_run(t.path(), Some("l20"), &inv);
    assert!(d.is_ok());
    let v = json(&d);
    assert_eq!(v["outcome"], "ok");
    assert_eq!(v["node_label"], "l20");
    let ad = &v["advertisement"];
    assert_eq!(ad["config_name"], "l20");
    let r = &ad["resources"][0];
    assert_eq!(r["name"], "nvidia.com/gpu");
    assert_eq!(r["sharing"], "time-slicing");
    assert_eq!(r["devices"].as_array().unwrap().len(), 8);
    assert_eq!(r["devices"][7]["id"], format!("{}::7", inv.gpus[0].uuid));
    assert_eq!(ad["labels"]["nvidia.com/gpu.product"], "NVIDIA-L20-SHARED");
    assert_eq!(ad["device_list_strategies"][0], "envvar");
    assert!(v["warnings"][0]
        .as_str()
        .unwrap()
        .contains("flags.notAFlag"));
    // The broken config does not stop this node, but the admin sees it.
    let other = v["other_config_errors"][0].as_str().unwrap();
    assert!(
        other.contains("broken") && other.contains("unknown version: v3"),
        "{other}"
    );
}

#[test]
fn a_bad_config_or_selection_prints_the_errors() {
    let t = tempfile::tempdir().unwrap();
    let bad =
        "sharing:\n  timeSlicing:\n    resources:\n      - {name: nvidia.com/gpu, replicas: 0}\n";
    std::fs::write(t.path().join("t4"), bad).unwrap();
    std::fs::write(t.path().join("l20"), L20).unwrap();
    let inv = common::node("t4");
    let v = json(&dry_run(t.path(), Some("t4"), &inv));
    assert_eq!(v["outcome"], "error");
    let e = v["errors"][0].as_str().unwrap();
    assert!(
        e.contains("/t4")
            && e.contains("sharing.timeSlicing.resources[0].replicas")
            && e.contains("got 0"),
        "{e}"
    );
    let v = json(&dry_run(t.path(), Some("h100"), &inv));
    assert!(v["errors"][0].as_str().unwrap().contains("h100"), "{v}");
    // A config the node cannot run: MPS beyond the T4's 48 clients.
    let mps = t.path().join("mps.yaml");
    std::fs::write(
        &mps,
        "sharing: {mps: {resources: [{name: gpu, replicas: 64}]}}\n",
    )
    .unwrap();
    let d = dry_run(&mps, None, &inv);
    assert!(!d.is_ok());
    assert!(json(&d)["errors"][0].as_str().unwrap().contains("64 > 48"));
}
