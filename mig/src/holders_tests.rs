use super::*;
use crate::apply::{apply, ApplyOptions, GpuStatus, MigBackend};
use crate::spec::MigConfigFile;
use crate::test_support::Fake;

const A100_80: &str = "NVIDIA A100-SXM4-80GB";

/// Seed 003's ConfigMap `config.yaml`, verbatim.
const SEED_003: &str = "version: v1
mig-configs:
  mixed-workload:
    - devices: [0]
      mig-enabled: true
      mig-devices:
        \"3g.40gb\": 1
        \"2g.20gb\": 2
  all-small:
    - devices: [0]
      mig-enabled: true
      mig-devices:
        \"1g.10gb\": 7
";

fn entries(name: &str) -> Vec<crate::spec::MigConfigSpec> {
    let cfg = MigConfigFile::parse(SEED_003.as_bytes(), "config.yaml").unwrap();
    cfg.config(name).unwrap().to_vec()
}

fn pod(ns: &str, name: &str) -> Holder {
    Holder::Pod {
        namespace: ns.into(),
        pod: name.into(),
        container: "main".into(),
        resource: "nvidia.com/mig-2g.20gb".into(),
    }
}

/// GPU 0 of a fake A100 with seed 003's mixed-workload; `(gi id, MIG UUID)` of each device.
fn mixed() -> (Fake, Vec<(u32, String)>) {
    let mut f = Fake::new(&[A100_80]);
    let out = apply(
        &mut f,
        &entries("mixed-workload"),
        &crate::NoHolders,
        ApplyOptions::default(),
    )
    .unwrap();
    assert_eq!(out.gpus[0].status, GpuStatus::Changed);
    let gpu = f.gpu(0).unwrap();
    let devs = gpu
        .instances
        .iter()
        .map(|g| (g.id, g.cis[0].uuid.clone().unwrap()))
        .collect();
    (f, devs)
}

fn failure(out: &crate::Outcome) -> String {
    match &out.gpus[0].status {
        GpuStatus::Failed(why) => why.clone(),
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[test]
fn a_holder_of_one_mig_device_blocks_its_destroy_and_names_device_holder_and_fix() {
    let (mut f, devs) = mixed();
    let (gi, uuid) = devs.iter().find(|(id, _)| *id == 3).unwrap().clone();
    let mut h = DeviceHolders::default();
    h.add(&uuid, pod("ml", "train-0"));
    h.add(
        &uuid,
        Holder::Process {
            pid: 4242,
            kind: "compute",
        },
    );
    f.writes.clear();
    let out = apply(&mut f, &entries("all-small"), &h, ApplyOptions::default()).unwrap();
    let why = failure(&out);
    assert!(why.contains(&format!("GPU instance {gi}, {uuid}")), "{why}");
    assert!(
        why.contains("pod ml/train-0 (container main, nvidia.com/mig-2g.20gb)"),
        "{why}"
    );
    assert!(why.contains("compute process pid 4242"), "{why}");
    assert!(
        why.contains("delete the pod") && why.contains("end the process"),
        "{why}"
    );
    assert!(why.contains("--drain"), "{why}");
    assert_eq!(f.gpu(0).unwrap().instances.len(), 3, "nothing destroyed");
    assert!(f.writes.is_empty(), "{:?}", f.writes);
}

#[test]
fn holders_of_devices_the_plan_keeps_do_not_block() {
    let (mut f, devs) = mixed();
    let mut h = DeviceHolders::default();
    for (_, uuid) in &devs {
        h.add(uuid, Holder::MpsClient { pid: 7, pod: None });
    }
    f.writes.clear();
    let out = apply(
        &mut f,
        &entries("mixed-workload"),
        &h,
        ApplyOptions::default(),
    )
    .unwrap();
    assert_eq!(out.gpus[0].status, GpuStatus::Unchanged);
    assert!(f.writes.is_empty());
}

#[test]
fn drain_destroys_held_devices() {
    let (mut f, devs) = mixed();
    let mut h = DeviceHolders::default();
    h.add(&devs[0].1, pod("ml", "train-0"));
    let drain = ApplyOptions {
        drain: true,
        ..ApplyOptions::default()
    };
    let out = apply(&mut f, &entries("all-small"), &h, drain).unwrap();
    assert_eq!(out.gpus[0].status, GpuStatus::Changed);
    assert_eq!(f.gpu(0).unwrap().instances.len(), 7);
}

#[test]
fn a_holder_of_the_whole_gpu_blocks_a_mig_mode_change() {
    let mut f = Fake::new(&[A100_80]);
    let uuid = f.gpu(0).unwrap().uuid;
    let mut h = DeviceHolders::default();
    h.add(
        &uuid,
        Holder::MpsClient {
            pid: 31,
            pod: Some("ml/infer-1".into()),
        },
    );
    let out = apply(&mut f, &entries("all-small"), &h, ApplyOptions::default()).unwrap();
    let why = failure(&out);
    assert!(
        why.contains("the GPU itself (MIG mode change to enabled)"),
        "{why}"
    );
    assert!(why.contains("MPS client pid 31 of pod ml/infer-1"), "{why}");
    assert!(why.contains(&uuid) && why.contains("--drain"), "{why}");
    assert!(f.writes.is_empty(), "{:?}", f.writes);
    assert!(!f.gpu(0).unwrap().mig.enabled());
}

#[test]
fn snapshot_merges_dedups_and_reads_replica_ids() {
    let mut a = DeviceHolders::default();
    a.add(
        "MIG-1",
        Holder::Process {
            pid: 1,
            kind: "compute",
        },
    );
    let mut b = DeviceHolders::default();
    b.add(
        "MIG-1",
        Holder::Process {
            pid: 1,
            kind: "compute",
        },
    );
    b.add("GPU-2", pod("a", "b"));
    a.extend(b);
    assert_eq!(a.of("MIG-1").len(), 1);
    assert_eq!(a.of("GPU-2"), [pod("a", "b")]);
    assert!(a.of("GPU-3").is_empty() && !a.is_empty());
    assert!(DeviceHolders::default().is_empty());
    // NVIDIA's device plugin names a time-sliced / MPS replica `<uuid>::<n>`.
    assert_eq!(device_id_uuid("GPU-2::3"), "GPU-2");
    assert_eq!(device_id_uuid("MIG-5"), "MIG-5");
}
