//! Partitionable devices from a GPU's MIG profiles: counters and placements (the A100/H100
//! placement table of NVIDIA's MIG user guide, "Supported MIG Profiles").
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use gpuhook_mig::{DeviceId, GiProfileInfo, MigMode};

use super::*;
use crate::slices::{build, UnhealthyPolicy};
use crate::testkit::{gpu_uuid, inventory};

fn prof(id: u32, name: &str, slices: u32, starts: &[u32], size: u32) -> GiProfileInfo {
    GiProfileInfo {
        id,
        name: name.into(),
        slices,
        instance_count: 7,
        memory_mib: 9856,
        placements: starts
            .iter()
            .map(|&start| Placement { start, size })
            .collect(),
    }
}

/// GPU 1 of the test inventory as the MIG manager reads an H100 with MIG on.
fn h100_state() -> GpuState {
    GpuState {
        index: 1,
        uuid: gpu_uuid(1),
        model: "NVIDIA H100 80GB HBM3".into(),
        device_id: DeviceId::from_nvml(0x233010de, None),
        mig: MigMode::Capable {
            current: true,
            pending: true,
        },
        profiles: vec![
            prof(19, "1g.10gb", 1, &[0, 1, 2, 3, 4, 5, 6], 1),
            prof(20, "1g.10gb+me", 1, &[0, 1, 2, 3, 4, 5, 6], 1),
            prof(15, "1g.20gb", 1, &[0, 2, 4, 6], 2),
            prof(14, "2g.20gb", 2, &[0, 2, 4], 2),
            prof(9, "3g.40gb", 3, &[0, 4], 4),
            prof(5, "4g.40gb", 4, &[0], 4),
            prof(0, "7g.80gb", 7, &[0], 8),
        ],
        compute_slices: 7,
        instances: Vec::new(),
    }
}

#[test]
fn every_placement_is_a_device_consuming_its_slices() {
    let devs = catalogue(&inventory(), &[h100_state()], Path::new("/nonexistent"));
    let names: Vec<&str> = devs.iter().map(|d| d.name.as_str()).collect();
    // GPU 0 (MIG off) unchanged; GPU 1: the full GPU then 7+4+3+2+1+1 placements, no +me.
    assert_eq!(names[0], "gpu-0");
    assert_eq!(names[1], "gpu-1");
    assert_eq!(devs.len(), 2 + 18, "{names:?}");
    assert!(names.contains(&"gpu-1-mig-1g10gb-19-6"));
    assert!(names.contains(&"gpu-1-mig-3g40gb-9-4"));
    assert!(!names.iter().any(|n| n.contains("1g10gbme")));
    let g3 = devs
        .iter()
        .find(|d| d.name == "gpu-1-mig-3g40gb-9-4")
        .unwrap();
    assert!(g3.is_mig());
    let c = g3.slot.as_ref().unwrap().counters();
    let keys: Vec<&String> = c.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        [
            "compute-slices",
            "memory-slice-4",
            "memory-slice-5",
            "memory-slice-6",
            "memory-slice-7"
        ]
    );
    assert_eq!(c["compute-slices"]["value"], "3");
    assert_eq!(g3.attributes["type"]["string"], "mig");
    assert_eq!(g3.attributes["profile"]["string"], "3g.40gb");
    assert!(!g3.attributes.contains_key("uuid"));
}

#[test]
fn slices_hold_counters_apart_from_devices() {
    let devs = catalogue(&inventory(), &[h100_state()], Path::new("/nonexistent"));
    let s = build(
        "gpu.nvidia.com",
        "node-a",
        &devs,
        &BTreeMap::new(),
        UnhealthyPolicy::Taint,
        false,
        1,
    )
    .unwrap();
    assert_eq!(s.len(), 2);
    let sets = s[0]["spec"]["sharedCounters"].as_array().unwrap();
    assert!(s[0]["spec"].get("devices").is_none());
    assert_eq!(sets.len(), 1);
    assert_eq!(sets[0]["name"], "gpu-1-counter-set");
    assert_eq!(sets[0]["counters"].as_object().unwrap().len(), 9);
    assert_eq!(sets[0]["counters"]["compute-slices"]["value"], "7");
    let full = &s[1]["spec"]["devices"][1];
    assert_eq!(full["name"], "gpu-1");
    assert_eq!(
        full["consumesCounters"][0]["counterSet"],
        "gpu-1-counter-set"
    );
    assert_eq!(full["consumesCounters"][0]["counters"], sets[0]["counters"]);
    assert!(s[1]["spec"]["devices"][0].get("consumesCounters").is_none());
    assert_eq!(s[1]["spec"]["pool"]["resourceSliceCount"], 2);
}

#[test]
fn a_gpu_without_mig_mode_is_as_before() {
    let mut st = h100_state();
    st.mig = MigMode::Capable {
        current: false,
        pending: false,
    };
    let devs = catalogue(&inventory(), &[st], Path::new("/nonexistent"));
    let plain = crate::devices::catalogue(&inventory(), Path::new("/nonexistent"));
    assert_eq!(devs, plain);
}
