//! GFD-compatible node labels and the NFD feature file, against the worked examples A and B of
//! `shared/reference/kdp-facts.md` §9 (NVIDIA k8s-device-plugin v0.20.0 `internal/lm`).
//! `gpu.mode` and `gpu.machine` come from sysfs under the node's driver root (a node built here
//! per example); labels from facts the inventory lacks (`vgpu.present`, `gfd.timestamp`, MIG
//! multiprocessors and engines) are not made.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test crate: a panic is the failure report

mod common;

use std::collections::BTreeMap;

use gpuhook_node::Inventory;
use gpuhook_sharing::config::parse;
use gpuhook_sharing::{advertise, nfd_feature_file, Advertisement};

/// A driver root with the sysfs files GFD reads: each GPU's PCI `class` and, when given, the
/// DMI product name. The inventory is pointed at it.
fn with_sysfs(inv: &mut Inventory, class: &str, machine: Option<&str>) -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    for g in &inv.gpus {
        let (domain, rest) = g.pci_bus_id.split_once(':').unwrap();
        let kernel = format!("{}:{}", &domain[4..], rest.to_ascii_lowercase());
        let dev = root.path().join("sys/bus/pci/devices").join(kernel);
        std::fs::create_dir_all(&dev).unwrap();
        std::fs::write(dev.join("class"), format!("{class}\n")).unwrap();
    }
    if let Some(m) = machine {
        let dmi = root.path().join("sys/class/dmi/id");
        std::fs::create_dir_all(&dmi).unwrap();
        std::fs::write(dmi.join("product_name"), format!("{m}\n")).unwrap();
    }
    inv.driver_root = root.path().to_path_buf();
    root
}

fn ad(yaml: &str, inv: &Inventory) -> Advertisement {
    advertise("test", &parse(yaml).unwrap(), inv, &|_| true).unwrap()
}

/// `key=value` pairs, `nvidia.com/` prefixed.
fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (format!("nvidia.com/{k}"), (*v).to_string()))
        .collect()
}

const VERSIONS: &[(&str, &str)] = &[
    ("cuda.driver.major", "550"),
    ("cuda.driver.minor", "107"),
    ("cuda.driver.rev", "02"),
    ("cuda.driver-version.major", "550"),
    ("cuda.driver-version.minor", "107"),
    ("cuda.driver-version.revision", "02"),
    ("cuda.driver-version.full", "550.107.02"),
    ("cuda.runtime.major", "12"),
    ("cuda.runtime.minor", "5"),
    ("cuda.runtime-version.major", "12"),
    ("cuda.runtime-version.minor", "5"),
    ("cuda.runtime-version.full", "12.5"),
];

/// Example A's node: 4× Tesla T4 (the simulated T4, four times), driver 550.107.02, CUDA 12.5.
fn four_t4() -> Inventory {
    let mut inv = common::node("t4");
    inv.driver_version = "550.107.02".into();
    inv.cuda_driver_version = Some("12.5".into());
    let g = inv.gpus[0].clone();
    inv.gpus = (0..4)
        .map(|i| {
            let mut g = g.clone();
            g.index = i;
            g.minor = i;
            g.uuid = format!("GPU-0000000{i}-0000-0000-0000-000000000000");
            g
        })
        .collect();
    inv
}

const EXAMPLE_A: &str = "version: v1\nflags: {migStrategy: none}\nsharing:\n  timeSlicing:\n    resources:\n      - {name: nvidia.com/gpu, replicas: 4}\n";

#[test]
fn worked_example_a_time_sliced_t4_node() {
    let mut inv = four_t4();
    // A 3D controller (what a T4 reports) on a machine with a DMI product name.
    let _root = with_sysfs(&mut inv, "0x030200", Some("PowerEdge R750xa"));
    let ad = ad(EXAMPLE_A, &inv);
    let mut want = labels(VERSIONS);
    want.extend(labels(&[
        ("gpu.mode", "compute"),
        ("gpu.machine", "PowerEdge-R750xa"),
        ("gpu.count", "4"),
        ("gpu.replicas", "4"),
        ("gpu.sharing-strategy", "time-slicing"),
        ("gpu.product", "Tesla-T4-SHARED"),
        ("gpu.memory", "15360"),
        ("gpu.family", "turing"),
        ("gpu.compute.major", "7"),
        ("gpu.compute.minor", "5"),
        ("mig.capable", "false"),
        ("mps.capable", "false"),
    ]));
    assert_eq!(ad.labels, want);
    let r = &ad.resources[0];
    assert_eq!((r.name.as_str(), r.devices.len()), ("nvidia.com/gpu", 16));
    assert_eq!(
        r.devices[5].id,
        "GPU-00000001-0000-0000-0000-000000000000::1"
    );
    // renameByDefault: advertised as nvidia.com/gpu.shared, product without the suffix.
    let renamed = EXAMPLE_A.replace(
        "timeSlicing:\n",
        "timeSlicing:\n    renameByDefault: true\n",
    );
    let ad = ad_named(&renamed);
    assert_eq!(ad.resources[0].name, "nvidia.com/gpu.shared");
    assert_eq!(ad.labels["nvidia.com/gpu.product"], "Tesla-T4");
    assert_eq!(ad.labels["nvidia.com/gpu.replicas"], "4");
    assert!(!ad.labels.contains_key("nvidia.com/mig.strategy"));
}

fn ad_named(yaml: &str) -> Advertisement {
    ad(yaml, &four_t4())
}

/// Example B's node: 1× A100-SXM4-40GB, MIG on, 2×3g.20gb + 1×1g.5gb (from the simulated
/// A100 node's first GPU).
fn a100_40gb() -> Inventory {
    let mut inv = common::node("a100-mig-mixed");
    inv.driver_version = "550.107.02".into();
    inv.cuda_driver_version = Some("12.5".into());
    inv.gpus.truncate(1);
    let g = &mut inv.gpus[0];
    g.name = "NVIDIA A100-SXM4-40GB".into();
    g.memory_mib = 40960;
    for (m, (profile, memory)) in
        g.mig_devices
            .iter_mut()
            .zip([("3g.20gb", 19968), ("3g.20gb", 19968), ("1g.5gb", 4864)])
    {
        m.profile = Some(profile.into());
        m.memory_mib = memory;
    }
    inv
}

#[test]
fn worked_example_b_mig_mixed_node() {
    let yaml = "version: v1\nflags: {migStrategy: mixed}\nsharing:\n  timeSlicing:\n    resources:\n      - {name: nvidia.com/mig-1g.5gb, replicas: 4}\n";
    let mut inv = a100_40gb();
    // No DMI product name on this machine: `unknown`, as newMachineTypeLabeler falls back.
    let _root = with_sysfs(&mut inv, "0x030200", None);
    let ad = ad(yaml, &inv);
    let mut want = labels(VERSIONS);
    want.extend(labels(&[
        ("gpu.mode", "compute"),
        ("gpu.machine", "unknown"),
        ("mig.strategy", "mixed"),
        ("mig.capable", "true"),
        ("mps.capable", "false"),
        ("gpu.count", "1"),
        ("gpu.replicas", "0"),
        ("gpu.sharing-strategy", "none"),
        ("gpu.product", "NVIDIA-A100-SXM4-40GB"),
        ("gpu.memory", "40960"),
        ("gpu.family", "ampere"),
        ("gpu.compute.major", "8"),
        ("gpu.compute.minor", "0"),
        ("mig-3g.20gb.count", "2"),
        ("mig-3g.20gb.replicas", "1"),
        ("mig-3g.20gb.sharing-strategy", "none"),
        ("mig-3g.20gb.product", "NVIDIA-A100-SXM4-40GB-MIG-3g.20gb"),
        ("mig-3g.20gb.memory", "19968"),
        ("mig-3g.20gb.slices.gi", "3"),
        ("mig-3g.20gb.slices.ci", "3"),
        ("mig-1g.5gb.count", "1"),
        ("mig-1g.5gb.replicas", "4"),
        ("mig-1g.5gb.sharing-strategy", "time-slicing"),
        (
            "mig-1g.5gb.product",
            "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb-SHARED",
        ),
        ("mig-1g.5gb.memory", "4864"),
        ("mig-1g.5gb.slices.gi", "1"),
        ("mig-1g.5gb.slices.ci", "1"),
    ]));
    assert_eq!(ad.labels, want);
    let names: Vec<&str> = ad.resources.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["nvidia.com/mig-1g.5gb", "nvidia.com/mig-3g.20gb"]);
    let shared = &ad.resources[0];
    let uuid = &inv.gpus[0].mig_devices[2].uuid;
    assert_eq!(shared.devices[3].id, format!("{uuid}::3"));
    assert_eq!(ad.resources[1].devices.len(), 2);
}

#[test]
fn mps_capable_only_for_mps_without_mig_and_single_labels_the_mig_device() {
    let mps = "sharing: {mps: {resources: [{name: gpu, replicas: 4}]}}";
    let ad1 = ad(mps, &common::node("l20"));
    assert_eq!(ad1.labels["nvidia.com/mps.capable"], "true");
    assert_eq!(ad1.labels["nvidia.com/gpu.sharing-strategy"], "mps");
    assert_eq!(ad1.labels["nvidia.com/gpu.product"], "NVIDIA-L20-SHARED");
    assert_eq!(ad1.labels["nvidia.com/gpu.family"], "ada-lovelace");
    assert_eq!(
        gpuhook_sharing::labels::sanitise("NVIDIA  H100 (80GB)/x"),
        "NVIDIA-H100-80GBx"
    );
    assert_eq!(gpuhook_sharing::labels::arch_family(12, 0), "blackwell");
    let ad2 = ad("flags: {migStrategy: single}", &common::node("h100-mig"));
    let l = &ad2.labels;
    assert_eq!(l["nvidia.com/mig.strategy"], "single");
    assert_eq!(
        l["nvidia.com/gpu.product"],
        "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"
    );
    assert_eq!(l["nvidia.com/gpu.count"], "7");
    assert_eq!(l["nvidia.com/gpu.replicas"], "1");
    assert_eq!(l["nvidia.com/mig.capable"], "true");
    assert_eq!(l["nvidia.com/mps.capable"], "false");
}

#[test]
fn the_nfd_feature_file_has_one_sorted_line_per_label() {
    let ad = ad(EXAMPLE_A, &four_t4());
    let text = nfd_feature_file(&ad);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), ad.labels.len());
    assert!(text.ends_with('\n'));
    assert!(lines.contains(&"nvidia.com/gpu.product=Tesla-T4-SHARED"));
    assert!(lines.contains(&"nvidia.com/gpu.replicas=4"));
    assert!(lines.contains(&"nvidia.com/cuda.driver-version.full=550.107.02"));
    let mut sorted = lines.clone();
    sorted.sort_unstable();
    assert_eq!(lines, sorted);
}

#[test]
fn mig_capable_follows_the_model_when_mig_is_off() {
    let mut g = common::node("t4").gpus[0].clone();
    for (name, capable) in [
        ("Tesla T4", false),
        ("NVIDIA L20", false),
        ("NVIDIA A10", false),
        ("NVIDIA A100-SXM4-80GB", true),
        ("NVIDIA H100 80GB HBM3", true),
        ("NVIDIA H200", true),
        ("NVIDIA H20", true),
        ("NVIDIA A30", true),
    ] {
        g.name = name.into();
        assert_eq!(gpuhook_sharing::labels::mig_capable(&g), capable, "{name}");
    }
}

/// `getModeForClasses`: one VGA-class GPU among 3D controllers, or an unreadable class, makes
/// the node's mode `unknown`; all VGA controllers make it `graphics`.
#[test]
fn gpu_mode_follows_the_pci_classes_as_gfd() {
    let mut inv = four_t4();
    let root = with_sysfs(&mut inv, "0x030000", None);
    assert_eq!(gpuhook_sharing::host_labels::gpu_mode(&inv), "graphics");
    let mut mixed = inv.clone();
    mixed.gpus[1].pci_bus_id = "00000000:AF:00.0".into();
    let dev = root.path().join("sys/bus/pci/devices/0000:af:00.0");
    std::fs::create_dir_all(&dev).unwrap();
    std::fs::write(dev.join("class"), "0x030200\n").unwrap();
    assert_eq!(gpuhook_sharing::host_labels::gpu_mode(&mixed), "unknown");
    inv.driver_root = root.path().join("elsewhere");
    assert_eq!(gpuhook_sharing::host_labels::gpu_mode(&inv), "unknown");
}
