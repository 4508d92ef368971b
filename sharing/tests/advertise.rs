//! What a node advertises under a config: NVIDIA's resource model (kdp-facts §2–§3, from
//! k8s-device-plugin v0.20.0 `internal/rm`), on simulated nodes (`sim/profiles`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test crate: a panic is the failure report

mod common;

use gpuhook_node::Inventory;
use gpuhook_sharing::config::parse;
use gpuhook_sharing::{
    advertise, load_config_set, AdvertiseError, Advertisement, Resource, SharingKind,
};

fn adv(yaml: &str, inv: &Inventory) -> Result<Advertisement, AdvertiseError> {
    advertise("test", &parse(yaml).unwrap(), inv, &|_| true)
}

fn resource<'a>(ad: &'a Advertisement, name: &str) -> &'a Resource {
    ad.resources
        .iter()
        .find(|r| r.name == name)
        .unwrap_or_else(|| panic!("no {name} in {:?}", names(ad)))
}

fn names(ad: &Advertisement) -> Vec<&str> {
    ad.resources.iter().map(|r| r.name.as_str()).collect()
}

fn ids(r: &Resource) -> Vec<&str> {
    r.devices.iter().map(|d| d.id.as_str()).collect()
}

const TS: &str = "version: v1\nsharing:\n  timeSlicing:\n    resources:\n      - {name: nvidia.com/gpu, replicas: ";

#[test]
fn the_seed_scenario_an_l20_node_with_8_replicas_and_a_t4_node_with_3_makes_11_slots() {
    let t = tempfile::tempdir().unwrap();
    std::fs::write(t.path().join("l20"), format!("{TS}8}}\n")).unwrap();
    std::fs::write(t.path().join("t4"), format!("{TS}3}}\n")).unwrap();
    let set = load_config_set(t.path()).unwrap();
    let mut slots = 0;
    for (label, profile, replicas) in [("l20", "l20", 8), ("t4", "t4", 3)] {
        let inv = common::node(profile);
        let (name, cfg) = set.select(Some(label)).unwrap();
        let ad = advertise(name, cfg, &inv, &|_| true).unwrap();
        assert_eq!(ad.config_name, label);
        assert_eq!(names(&ad), ["nvidia.com/gpu"]);
        let r = resource(&ad, "nvidia.com/gpu");
        assert_eq!(
            (r.sharing, r.replicas),
            (SharingKind::TimeSlicing, replicas)
        );
        let uuid = &inv.gpus[0].uuid;
        let want: Vec<String> = (0..replicas).map(|n| format!("{uuid}::{n}")).collect();
        assert_eq!(ids(r), want);
        assert!(r.devices.iter().all(|d| d.backing.gpu_uuid == *uuid));
        slots += r.devices.len();
    }
    assert_eq!(slots, 11);
}

#[test]
fn full_gpus_are_nvidia_com_gpu_named_by_uuid_or_index() {
    let inv = common::node("dgx-h100");
    let ad = adv("version: v1\n", &inv).unwrap();
    let r = resource(&ad, "nvidia.com/gpu");
    assert_eq!(
        (r.sharing, r.replicas, r.devices.len()),
        (SharingKind::None, 1, 8)
    );
    assert_eq!(r.devices[3].id, inv.gpus[3].uuid);
    assert_eq!(r.devices[3].backing.device_name, inv.gpus[3].uuid);
    let ad = ad_index(&inv);
    let r = resource(&ad, "nvidia.com/gpu");
    // IDs stay UUIDs; deviceIDStrategy names the device in Allocate's answer.
    assert_eq!(r.devices[3].id, inv.gpus[3].uuid);
    assert_eq!(r.devices[3].backing.device_name, "3");
}

fn ad_index(inv: &Inventory) -> Advertisement {
    adv("flags: {plugin: {deviceIDStrategy: index, deviceListStrategy: [cdi-cri, envvar], passDeviceSpecs: true}}", inv).unwrap()
}

#[test]
fn strategy_fields_come_from_the_flags() {
    use gpuhook_sharing::{DeviceIdStrategy as I, DeviceListStrategy as L};
    let ad = ad_index(&common::node("t4"));
    assert_eq!(ad.device_list_strategies, [L::CdiCri, L::Envvar]);
    assert_eq!(ad.device_id_strategy, I::Index);
    assert!(ad.pass_device_specs);
    assert_eq!(ad.cdi_annotation_prefix, "cdi.k8s.io/");
    assert_eq!(ad.mps_root, None);
    let ad = adv(
        "flags: {mpsRoot: /run/nvidia/mps, plugin: {cdiAnnotationPrefix: x.io/}}",
        &common::node("t4"),
    )
    .unwrap();
    assert_eq!(ad.device_list_strategies, [L::Envvar]);
    assert_eq!(ad.device_id_strategy, I::Uuid);
    assert!(!ad.pass_device_specs);
    assert_eq!(ad.cdi_annotation_prefix, "x.io/");
    assert_eq!(ad.mps_root.as_deref(), Some("/run/nvidia/mps"));
}

#[test]
fn mig_none_exposes_mig_enabled_gpus_whole() {
    let inv = common::node("a100-mig-mixed");
    let ad = adv("flags: {migStrategy: none}", &inv).unwrap();
    assert_eq!(names(&ad), ["nvidia.com/gpu"]);
    let r = resource(&ad, "nvidia.com/gpu");
    assert_eq!(
        ids(r),
        [inv.gpus[0].uuid.as_str(), inv.gpus[1].uuid.as_str()]
    );
}

#[test]
fn mig_mixed_advertises_one_resource_per_profile() {
    let inv = common::node("a100-mig-mixed");
    let ad = adv("flags: {migStrategy: mixed}", &inv).unwrap();
    // Both GPUs have MIG on: no nvidia.com/gpu devices at all.
    assert_eq!(
        names(&ad),
        [
            "nvidia.com/mig-1g.10gb",
            "nvidia.com/mig-2g.20gb",
            "nvidia.com/mig-3g.40gb"
        ]
    );
    assert_eq!(resource(&ad, "nvidia.com/mig-1g.10gb").devices.len(), 7);
    let r = resource(&ad, "nvidia.com/mig-2g.20gb");
    assert_eq!(
        ids(r),
        [
            inv.gpus[0].mig_devices[1].uuid.as_str(),
            inv.gpus[0].mig_devices[2].uuid.as_str()
        ]
    );
    let mig = r.devices[0].backing.mig.as_ref().unwrap();
    assert_eq!((mig.gi, mig.ci, mig.profile.as_str()), (3, 0, "2g.20gb"));
    let ad = ad_with_mig_index(&inv);
    let r = resource(&ad, "nvidia.com/mig-1g.10gb");
    assert_eq!(r.devices[6].backing.device_name, "1:6");
}

fn ad_with_mig_index(inv: &Inventory) -> Advertisement {
    adv(
        "flags: {migStrategy: mixed, plugin: {deviceIDStrategy: index}}",
        inv,
    )
    .unwrap()
}

#[test]
fn mig_mixed_refuses_profiles_with_fewer_compute_slices_and_plus_becomes_dot() {
    let mut inv = common::node("a100-mig-mixed");
    inv.gpus[1].mig_devices[0].profile = Some("1g.10gb+me".into());
    let ad = adv("flags: {migStrategy: mixed}", &inv).unwrap();
    assert_eq!(resource(&ad, "nvidia.com/mig-1g.10gb.me").devices.len(), 1);
    inv.gpus[0].mig_devices[0].profile = Some("1c.3g.40gb".into());
    let e = adv("flags: {migStrategy: mixed}", &inv)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("MIG profile '1c.3g.40gb'")
            && e.contains("does not match any resource patterns"),
        "{e}"
    );
}

#[test]
fn mig_single_needs_one_profile_on_every_gpu() {
    let ad1 = adv("flags: {migStrategy: single}", &common::node("h100-mig")).unwrap();
    assert_eq!(names(&ad1), ["nvidia.com/gpu"]);
    let r = resource(&ad1, "nvidia.com/gpu");
    assert_eq!(r.devices.len(), 7);
    assert!(r.devices.iter().all(|d| d.id.starts_with("MIG-")));
    let single = "flags: {migStrategy: single}";
    let e = adv(single, &common::node("a100-mig-mixed"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("more than one MIG device type present on node"),
        "{e}"
    );
    let e = adv(single, &common::node("h100-mig-empty"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("device 0 has no MIG devices configured"), "{e}");
    let mut inv = common::node("dgx-h100");
    inv.gpus[0] = common::node("h100-mig").gpus[0].clone();
    let e = adv(single, &inv).unwrap_err().to_string();
    assert!(e.contains("same migEnabled value"), "{e}");
    // Without MIG anywhere, single is none.
    let ad2 = adv(single, &common::node("t4")).unwrap();
    assert_eq!(resource(&ad2, "nvidia.com/gpu").devices.len(), 1);
}

#[test]
fn rename_by_default_advertises_name_shared_and_explicit_renames_are_ignored() {
    let inv = common::node("t4");
    let yaml =
        "sharing: {timeSlicing: {renameByDefault: true, resources: [{name: gpu, replicas: 4}]}}";
    let ad1 = adv(yaml, &inv).unwrap();
    assert_eq!(names(&ad1), ["nvidia.com/gpu.shared"]);
    assert_eq!(resource(&ad1, "nvidia.com/gpu.shared").devices.len(), 4);
    // NVIDIA's running plugin drops `rename` and `devices` (DisableResourceNamingInConfig).
    let yaml = "sharing: {timeSlicing: {resources: [{name: gpu, rename: gpu-ts, replicas: 2, devices: [1]}]}}";
    let (ad2, warnings) = gpuhook_sharing::advertise_with_warnings(
        "t",
        &parse(yaml).unwrap(),
        &common::node("dgx-h100"),
        &|_| true,
    )
    .unwrap();
    assert_eq!(names(&ad2), ["nvidia.com/gpu"]);
    assert_eq!(resource(&ad2, "nvidia.com/gpu").devices.len(), 16);
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("rename: \"gpu-ts\" ignored")),
        "{warnings:?}"
    );
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("resources[0].devices: ignored")),
        "{warnings:?}"
    );
    let mps = "sharing: {mps: {resources: [{name: gpu, replicas: 2, devices: [1]}]}}";
    let (_, warnings) = gpuhook_sharing::advertise_with_warnings(
        "m",
        &parse(mps).unwrap(),
        &common::node("dgx-h100"),
        &|_| true,
    )
    .unwrap();
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("only the GPUs gpu-mps-daemon runs MPS on are advertised")),
        "{warnings:?}"
    );
}

#[test]
fn time_slicing_a_mig_profile_leaves_the_others_whole() {
    let inv = common::node("a100-mig-mixed");
    let yaml = "flags: {migStrategy: mixed}\nsharing: {timeSlicing: {failRequestsGreaterThanOne: true, resources: [{name: nvidia.com/mig-2g.20gb, replicas: 3}]}}";
    let ad = adv(yaml, &inv).unwrap();
    let r = resource(&ad, "nvidia.com/mig-2g.20gb");
    assert_eq!(
        (r.sharing, r.replicas, r.devices.len()),
        (SharingKind::TimeSlicing, 3, 6)
    );
    assert!(r.fail_requests_greater_than_one);
    let uuid = &inv.gpus[0].mig_devices[1].uuid;
    assert_eq!(
        ids(r)[..3],
        [
            format!("{uuid}::0"),
            format!("{uuid}::1"),
            format!("{uuid}::2")
        ]
    );
    assert_eq!(r.devices[2].replica, Some(2));
    let whole = resource(&ad, "nvidia.com/mig-3g.40gb");
    assert_eq!((whole.sharing, whole.devices.len()), (SharingKind::None, 1));
}

#[test]
fn mps_replicas_are_capped_as_nvidia_caps_them_and_follow_daemon_readiness() {
    let mps = |n: u32| format!("sharing: {{mps: {{resources: [{{name: gpu, replicas: {n}}}]}}}}");
    let t4 = common::node("t4"); // compute capability 7.5: at most 48
    let r48 = adv(&mps(48), &t4).unwrap();
    let r = resource(&r48, "nvidia.com/gpu");
    assert_eq!((r.sharing, r.devices.len()), (SharingKind::Mps, 48));
    assert!(
        r.fail_requests_greater_than_one,
        "MPS defaults failRequestsGreaterThanOne to true"
    );
    let e = adv(&mps(49), &t4).unwrap_err().to_string();
    assert!(
        e.contains("invalid device maximum allowed replicas exceeded: 49 > 48"),
        "{e}"
    );
    let mut v100 = t4.clone();
    v100.gpus[0].compute_capability = Some((7, 0));
    assert!(adv(&mps(16), &v100).is_ok());
    let e = adv(&mps(17), &v100).unwrap_err().to_string();
    assert!(e.contains("17 > 16"), "{e}");
    // Only GPUs whose MPS daemon is ready are advertised.
    let dgx = common::node("dgx-h100");
    let ready = dgx.gpus[2].uuid.clone();
    let ad = advertise("m", &parse(&mps(4)).unwrap(), &dgx, &|u| u == ready).unwrap();
    let r = resource(&ad, "nvidia.com/gpu");
    assert_eq!(r.devices.len(), 4);
    assert!(r.devices.iter().all(|d| d.backing.gpu_uuid == ready));
    let none = advertise("m", &parse(&mps(4)).unwrap(), &dgx, &|_| false).unwrap();
    assert!(resource(&none, "nvidia.com/gpu").devices.is_empty());
}

#[test]
fn mps_on_mig_devices_is_refused() {
    let yaml =
        "flags: {migStrategy: single}\nsharing: {mps: {resources: [{name: gpu, replicas: 2}]}}";
    let e = adv(yaml, &common::node("h100-mig"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("sharing using MPS is not supported for MIG devices"),
        "{e}"
    );
}
