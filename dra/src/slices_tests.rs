//! Slices within the API server's limits (dra-facts §3).
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::Path;

use super::*;
use crate::devices::catalogue;
use crate::testkit::{gpu_uuid, inventory};

fn devices(n: usize) -> Vec<NodeDevice> {
    let base = catalogue(&inventory(), Path::new("/nonexistent"))[0].clone();
    (0..n)
        .map(|i| NodeDevice {
            name: format!("gpu-{i}"),
            uuid: format!("GPU-{i}"),
            gpu_uuid: format!("GPU-{i}"),
            ..base.clone()
        })
        .collect()
}

#[test]
fn one_pool_split_at_128_devices() {
    let s = build(
        "gpu.nvidia.com",
        "node-a",
        &devices(200),
        &BTreeMap::new(),
        UnhealthyPolicy::Taint,
        false,
        3,
    )
    .unwrap();
    assert_eq!(s.len(), 2);
    assert_eq!(
        s[0]["spec"]["devices"].as_array().unwrap().len(),
        MAX_DEVICES
    );
    assert_eq!(
        s[1]["spec"]["pool"],
        serde_json::json!({"name": "node-a", "generation": 3, "resourceSliceCount": 2})
    );
    assert_eq!(s[0]["metadata"]["name"], "node-a-gpu.nvidia.com-0");
}

#[test]
fn tainted_slices_hold_at_most_64() {
    let mut bad = BTreeMap::new();
    bad.insert("GPU-3".to_string(), "critical Xid 48".to_string());
    let s = build(
        "gpu.nvidia.com",
        "node-a",
        &devices(100),
        &bad,
        UnhealthyPolicy::Taint,
        false,
        1,
    )
    .unwrap();
    assert_eq!(s.len(), 2);
    assert_eq!(
        s[0]["spec"]["devices"].as_array().unwrap().len(),
        MAX_DEVICES_WITH_TAINTS
    );
    let t = &s[0]["spec"]["devices"][3]["taints"][0];
    assert_eq!(t["key"], UNHEALTHY_TAINT);
    assert_eq!(t["effect"], "NoSchedule");
    assert_eq!(t["value"], "criticalXid48");
    let w = build(
        "gpu.nvidia.com",
        "node-a",
        &devices(100),
        &bad,
        UnhealthyPolicy::Withdraw,
        false,
        1,
    )
    .unwrap();
    assert_eq!(w.len(), 1);
    assert_eq!(w[0]["spec"]["devices"].as_array().unwrap().len(), 99);
}

#[test]
fn limits_are_checked() {
    let mut d = devices(1);
    d[0].attributes.insert(
        "productName".into(),
        serde_json::json!({"string": "x".repeat(65)}),
    );
    let err = build(
        "gpu.nvidia.com",
        "n",
        &d,
        &BTreeMap::new(),
        UnhealthyPolicy::Taint,
        false,
        1,
    )
    .unwrap_err();
    assert!(err.to_string().contains("at most 64"), "{err}");
    let mut d = devices(1);
    for i in 0..32 {
        d[0].attributes
            .insert(format!("extra{i}"), serde_json::json!({"int": i}));
    }
    let err = build(
        "gpu.nvidia.com",
        "n",
        &d,
        &BTreeMap::new(),
        UnhealthyPolicy::Taint,
        false,
        1,
    )
    .unwrap_err();
    assert!(err.to_string().contains("at most 32"), "{err}");
    assert!(valid_qualified_name("resource.kubernetes.io/pcieRoot"));
    assert!(!valid_qualified_name("9lives"));
    assert!(!valid_qualified_name(&"a".repeat(33)));
    assert!(slice_name(&"n".repeat(250), "gpu.nvidia.com", 0).is_err());
    let _ = gpu_uuid(0);
}

/// KEP-5075: full GPUs multi-allocatable with thread and memory capacities; MIG devices not.
#[test]
fn consumable_capacity_for_full_gpus() {
    let devs = crate::devices::catalogue(&inventory(), Path::new("/nonexistent"));
    let s = build(
        "gpu.nvidia.com",
        "n",
        &devs,
        &BTreeMap::new(),
        UnhealthyPolicy::Taint,
        true,
        1,
    )
    .unwrap();
    let d = &s[0]["spec"]["devices"];
    assert_eq!(d[0]["allowMultipleAllocations"], true);
    assert_eq!(
        d[0]["capacity"][THREAD_PERCENTAGE]["requestPolicy"]["validRange"]["max"],
        "100"
    );
    assert_eq!(
        d[0]["capacity"]["memory"]["requestPolicy"]["validRange"]["step"],
        (1u64 << 20).to_string()
    );
    assert!(d[1]["allowMultipleAllocations"].is_null());
}
