//! Partitionable devices from a GPU's MIG profiles: counters and placements (the A100/H100
//! placement table of NVIDIA's MIG user guide, "Supported MIG Profiles").
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use gpuhook_mig::{DeviceId, GiProfileInfo, MigMode};
use gpuhook_node::nvml::MigEngines;

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
        engines: None,
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
    let devs = catalogue(
        &inventory(),
        &[h100_state()],
        Path::new("/nonexistent"),
        &[],
    );
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
    let devs = catalogue(
        &inventory(),
        &[h100_state()],
        Path::new("/nonexistent"),
        &[],
    );
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

/// NVIDIA's publish rule (`nvlib.go`, `GetPerGpuAllocatableDevices`/`isDynamicMIGCapable`):
/// Hopper in either mode offers the full GPU and the placements; Ampere with MIG mode on only the
/// placements (its counter set still published), Ampere with MIG mode off only the plain GPU.
#[test]
fn the_full_gpu_is_published_only_where_it_can_be_prepared() {
    let off = MigMode::Capable {
        current: false,
        pending: false,
    };
    assert!(toggles_mig(Some("hopper")) && toggles_mig(Some("Blackwell")));
    assert!(!toggles_mig(Some("ampere")) && !toggles_mig(None));
    // Hopper, MIG mode off: the full GPU (a plain GPU device) and every placement.
    let mut st = h100_state();
    st.mig = off;
    let mut inv = inventory();
    inv.gpus[1].mig_enabled = false;
    inv.gpus[1].mig_devices.clear();
    let devs = catalogue(&inv, &[st.clone()], Path::new("/nonexistent"), &[]);
    let full = devs.iter().find(|d| d.name == "gpu-1").unwrap();
    assert_eq!(full.dev, gpuhook_node::DeviceRef::Gpu { index: 1 });
    assert!(full.slot.as_ref().unwrap().offered);
    // (`1g.10gb+me` needs the engine counts, which this state lacks.)
    assert_eq!(
        devs.iter().filter(|d| d.is_mig()).count(),
        7 + 4 + 3 + 2 + 1 + 1
    );
    // Ampere, MIG mode off: not partitionable, as before.
    inv.gpus[1].architecture = Some("ampere".into());
    let devs = catalogue(&inv, &[st.clone()], Path::new("/nonexistent"), &[]);
    assert_eq!(
        devs,
        crate::devices::catalogue(&inv, Path::new("/nonexistent"))
    );
    // Ampere, MIG mode on: placements and the counter set, no full GPU in the slices.
    let mut inv = inventory();
    inv.gpus[1].architecture = Some("ampere".into());
    let devs = catalogue(&inv, &[h100_state()], Path::new("/nonexistent"), &[]);
    let s = build(
        "gpu.nvidia.com",
        "n",
        &devs,
        &BTreeMap::new(),
        UnhealthyPolicy::Taint,
        false,
        1,
    )
    .unwrap();
    let names: Vec<&str> = s
        .iter()
        .filter_map(|s| s["spec"]["devices"].as_array())
        .flatten()
        .filter_map(|d| d["name"].as_str())
        .collect();
    assert!(!names.contains(&"gpu-1") && names.contains(&"gpu-1-mig-7g80gb-0-0"));
    assert!(names.contains(&"gpu-0"));
    let sets: Vec<&Value> = s
        .iter()
        .filter_map(|s| s["spec"]["sharedCounters"].as_array())
        .flatten()
        .collect();
    assert_eq!(sets.len(), 1);
    assert_eq!(sets[0]["name"], "gpu-1-counter-set");
}

/// NVML's profile info counts (illustrative H100-like values): SMs per slice 16, one copy engine
/// per slice, the media profile holds the GPU's only JPEG and OFA engines.
fn with_engines(mut st: GpuState) -> GpuState {
    for p in &mut st.profiles {
        let media = u32::from(p.name.ends_with("+me") || p.slices == 7);
        p.engines = Some(MigEngines {
            multiprocessors: 16 * p.slices,
            copy_engines: p.slices,
            decoders: p.slices.min(7),
            encoders: 0,
            jpeg_engines: media,
            ofa_engines: media,
        });
    }
    st
}

fn find<'a>(devs: &'a [NodeDevice], name: &str) -> &'a NodeDevice {
    devs.iter().find(|d| d.name == name).unwrap()
}

#[test]
fn engine_counters_publish_the_media_profiles() {
    let devs = catalogue(
        &inventory(),
        &[with_engines(h100_state())],
        Path::new("/nonexistent"),
        &[],
    );
    // 18 plain placements and 7 of 1g.10gb+me.
    assert_eq!(devs.len(), 2 + 18 + 7);
    let sets = counter_sets(&devs);
    let set = &sets[0]["counters"];
    // NVIDIA's rule: the GPU's counter is the largest of any profile.
    assert_eq!(set["multiprocessors"]["value"], "112");
    assert_eq!(set["ofa-engines"]["value"], "1");
    assert_eq!(set["memory"]["value"], (9856u64 << 20).to_string());
    let me = find(&devs, "gpu-1-mig-1g10gbme-20-3");
    assert_eq!(me.attributes["profile"]["string"], "1g.10gb+me");
    let c = me.slot.as_ref().unwrap().counters();
    assert_eq!(
        c["ofa-engines"]["value"], "1",
        "two +me never fit the GPU's one OFA"
    );
    assert_eq!(c["multiprocessors"]["value"], "16");
    assert_eq!(c["memory-slice-3"]["value"], "1");
    let json = crate::slices::device_json(me, None, false);
    assert_eq!(json["capacity"]["multiprocessors"]["value"], "16");
    assert_eq!(json["capacity"]["jpegEngines"]["value"], "1");
    let full = crate::slices::device_json(find(&devs, "gpu-1"), None, false);
    assert_eq!(full["consumesCounters"][0]["counters"], *set);
}

fn with_instance(mut st: GpuState, id: u32, profile_id: u32, start: u32, size: u32) -> GpuState {
    st.instances.push(gpuhook_mig::GpuInstance {
        id,
        profile_id,
        placement: Placement { start, size },
        cis: Vec::new(),
    });
    st
}

#[test]
fn mig_devices_made_by_others_are_subtracted() {
    // A 3g.40gb at slices 4..8 made by the MIG manager.
    let st = with_instance(with_engines(h100_state()), 1, 9, 4, 4);
    let devs = catalogue(
        &inventory(),
        std::slice::from_ref(&st),
        Path::new("/x"),
        &[],
    );
    let names: Vec<&str> = devs.iter().map(|d| d.name.as_str()).collect();
    assert!(names.contains(&"gpu-1-mig-1g10gb-19-0"));
    assert!(names.contains(&"gpu-1-mig-3g40gb-9-0"));
    for gone in [
        "gpu-1-mig-1g10gb-19-4",
        "gpu-1-mig-3g40gb-9-4",
        "gpu-1-mig-7g80gb-0-0",
    ] {
        assert!(
            !names.contains(&gone),
            "{gone} overlaps the existing device"
        );
    }
    let set = &counter_sets(&devs)[0]["counters"];
    assert_eq!(set["memory-slice-4"]["value"], "0");
    assert_eq!(set["memory-slice-3"]["value"], "1");
    assert_eq!(set["compute-slices"]["value"], "4");
    assert_eq!(set["multiprocessors"]["value"], "64");
    // The full GPU is published consuming everything: it no longer fits its set.
    let full = find(&devs, "gpu-1").slot.as_ref().unwrap().counters();
    assert_eq!(full["memory-slice-4"]["value"], "1");
    // The same instance made by this plugin for a prepared claim is not subtracted.
    let mine = catalogue(&inventory(), &[st], Path::new("/x"), &[(1, 1)]);
    assert_eq!(mine.len(), 2 + 25);
    assert_eq!(
        counter_sets(&mine)[0]["counters"]["memory-slice-4"]["value"],
        "1"
    );
}

#[test]
fn only_instances_a_checkpoint_record_names_are_owned() {
    use crate::checkpoint::{ClaimEntry, ClaimState};
    use crate::dynmig::{owned, MigRecord};
    let st = with_instance(with_instance(h100_state(), 3, 19, 0, 1), 5, 19, 1, 1);
    let st = with_instance(st, 7, 14, 2, 2);
    let rec = |gi: Option<u32>, start, creating| MigRecord {
        device: "d".into(),
        gpu: 1,
        profile_id: 19,
        start,
        size: 1,
        creating,
        gpu_instance: gi,
        compute_instance: None,
        uuid: None,
    };
    let entry = ClaimEntry {
        state: ClaimState::PrepareStarted,
        namespace: "ns".into(),
        name: "c".into(),
        devices: Vec::new(),
        mps_dir: None,
        // By id; by placement after a crash before the ids were recorded; never asked of NVML.
        mig: vec![
            rec(Some(3), 0, true),
            rec(None, 1, true),
            rec(None, 2, false),
        ],
    };
    assert_eq!(owned([&entry].into_iter(), &[st]), [(1, 3), (1, 5)]);
}
