//! Planning a claim: devices of this node only, NVIDIA's config resolution, MPS limits checked
//! against the devices (dra-facts §5).
#![allow(clippy::unwrap_used)]

use std::path::Path;

use serde_json::json;

use super::*;
use crate::claim::parse_claim;
use crate::devices::catalogue;
use crate::testkit::{claim, gpu_uuid, inventory, opaque};

fn mps(extra: serde_json::Value) -> serde_json::Value {
    json!({"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
           "sharing": {"strategy": "MPS", "mpsConfig": extra}})
}

fn plan_of(results: &[(&str, &str)], configs: Vec<serde_json::Value>) -> Result<usize, String> {
    let devs = catalogue(&inventory(), Path::new("/x"));
    let c = parse_claim(
        claim("ns", "c", "u", "node-a", results, configs),
        "ns",
        "c",
        "u",
    )
    .unwrap();
    plan(&c, "gpu.nvidia.com", "node-a", &devs, Allowed::default())
        .map(|p| p.devices.len())
        .map_err(|e| e.to_string())
}

#[test]
fn mps_limits_from_the_config() {
    let devs = catalogue(&inventory(), Path::new("/x"));
    let c = parse_claim(
        claim("ns", "c", "u", "node-a", &[("gpu", "gpu-0")],
              vec![opaque(&["gpu"], mps(json!({"defaultActiveThreadPercentage": 25, "defaultPinnedDeviceMemoryLimit": "10Gi"})))]),
        "ns", "c", "u",
    )
    .unwrap();
    let p = plan(&c, "gpu.nvidia.com", "node-a", &devs, Allowed::default()).unwrap();
    let m = p.mps.unwrap();
    assert_eq!(m.uuids, [gpu_uuid(0)]);
    assert_eq!(m.active_thread_percentage, 25);
    assert_eq!(m.pinned_limits_mib, [Some(10240)]);
}

#[test]
fn bad_claims_are_refused_with_the_reason() {
    type Case<'a> = (Vec<(&'a str, &'a str)>, Vec<serde_json::Value>, &'a str);
    let cases: Vec<Case> = vec![
        (
            vec![("gpu", "gpu-7")],
            vec![],
            "device \"gpu-7\" of pool \"node-a\" is not on this node",
        ),
        (
            vec![("gpu", "gpu-0")],
            vec![opaque(
                &[],
                mps(json!({"defaultPinnedDeviceMemoryLimit": "100Gi"})),
            )],
            "above the memory of gpu-0",
        ),
        (
            vec![("gpu", "gpu-0")],
            vec![opaque(
                &[],
                mps(json!({"defaultPerDevicePinnedMemoryLimit": {"GPU-nope": "1Gi"}})),
            )],
            "invalid device",
        ),
        (
            vec![("gpu", "gpu-0")],
            vec![opaque(
                &[],
                json!({"apiVersion": "resource.nvidia.com/v1beta1", "kind": "VfioDeviceConfig"}),
            )],
            "kind \"VfioDeviceConfig\"",
        ),
        (
            vec![("mig", "gpu-1-mig-1g10gb-9-0")],
            vec![opaque(&["mig"], mps(json!({})))],
            "cannot apply GpuConfig",
        ),
    ];
    for (results, configs, want) in cases {
        let err = plan_of(&results, configs).unwrap_err();
        assert!(err.contains(want), "{want}: {err}");
    }
}

#[test]
fn other_pools_and_drivers() {
    // A device of this driver in another node's pool is not ours to prepare.
    let devs = catalogue(&inventory(), Path::new("/x"));
    let c = parse_claim(
        claim("ns", "c", "u", "node-b", &[("gpu", "gpu-0")], vec![]),
        "ns",
        "c",
        "u",
    )
    .unwrap();
    assert!(plan(&c, "gpu.nvidia.com", "node-a", &devs, Allowed::default()).is_err());
    // Another driver's results are left to its plugin.
    let mut v = claim("ns", "c", "u", "node-a", &[("gpu", "gpu-0")], vec![]);
    v["status"]["allocation"]["devices"]["results"][0]["driver"] = json!("example.com");
    let c = parse_claim(v, "ns", "c", "u").unwrap();
    assert_eq!(
        plan(&c, "gpu.nvidia.com", "node-a", &devs, Allowed::default())
            .unwrap()
            .devices
            .len(),
        0
    );
}

#[test]
fn uid_must_match() {
    let err = parse_claim(
        claim("ns", "c", "u2", "node-a", &[], vec![]),
        "ns",
        "c",
        "u1",
    )
    .unwrap_err();
    assert!(err.to_string().contains("re-created"), "{err}");
}

/// KEP-5075: a share of a multi-allocatable GPU becomes MPS with the consumed capacity as limits.
#[test]
fn a_consumable_capacity_share_is_mps_with_its_consumption() {
    let devs = catalogue(&inventory(), Path::new("/x"));
    let mut v = claim("ns", "c", "u", "node-a", &[("gpu", "gpu-0")], vec![]);
    v["status"]["allocation"]["devices"]["results"][0]["shareID"] = json!("7f1c");
    v["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"] =
        json!({"threadPercentage": "30", "memory": "8Gi"});
    let c = parse_claim(v, "ns", "c", "u").unwrap();
    let on = Allowed {
        consumable_mps: true,
        ..Allowed::default()
    };
    let p = plan(&c, "gpu.nvidia.com", "node-a", &devs, on).unwrap();
    let m = p.mps.unwrap();
    assert_eq!(m.active_thread_percentage, 30);
    assert_eq!(m.pinned_limits_mib, [Some(8192)]);
    assert_eq!(p.devices[0].result.share_id.as_deref(), Some("7f1c"));
    // Off: the share is prepared as the device, without MPS.
    let p = plan(&c, "gpu.nvidia.com", "node-a", &devs, Allowed::default()).unwrap();
    assert!(p.mps.is_none());
}
