//! The full GPU under partitionable MIG, as NVIDIA's DynamicMIG handles it
//! (kubernetes-sigs/dra-driver-nvidia-gpu, `cmd/gpu-kubelet-plugin/nvlib.go`):
//! `GetPerGpuAllocatableDevices` publishes the full GPU only when MIG mode is off or the GPU can
//! switch it without a reset (`supportsMIGModeToggle`: Hopper and newer), an Ampere GPU in MIG
//! mode offers its placements only (its counter set still published); `createMigDevice` enables
//! MIG mode before a GPU's first MIG device and `deleteMigDevice` → `maybeDisableMigMode`
//! disables it when none is left.
//!
//! Needs root and `cargo build -p gpuhook-sim --bins` and `cargo build -p gpuhook-mock-nvml`;
//! skipped otherwise, a failure under GPUHOOK_REQUIRE_E2E=1.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "common/apiserver.rs"]
mod apiserver;
#[path = "common/partition.rs"]
mod part;
#[path = "common/plugin.rs"]
mod plugin;
#[path = "common/sim.rs"]
mod sim;

use std::path::{Path, PathBuf};

use apiserver::ApiServer;
use gpuhook_dra::driver::ClaimRef;
use gpuhook_dra::testkit::claim;
use gpuhook_node::DiscoverOptions;
use part::{instances, instances_of, mig_claim, published, sim_node, start};
use plugin::{specs, wait_for, NODE};

/// GPU `gpu`'s MIG mode `(current, pending)` as NVML reports it.
fn mode(root: &Path, gpu: u32) -> (bool, bool) {
    let p = gpuhook_dra::run::partitioner(&DiscoverOptions::for_root(root)).unwrap();
    match p.with(|b| b.gpu(gpu)).unwrap().mig {
        gpuhook_mig::MigMode::Capable { current, pending } => (current, pending),
        gpuhook_mig::MigMode::NotCapable => panic!("GPU {gpu} is not MIG capable"),
    }
}

fn set_mode(root: &Path, gpu: u32, on: bool) {
    let p = gpuhook_dra::run::partitioner(&DiscoverOptions::for_root(root)).unwrap();
    assert!(!p.with(|b| b.set_mig_mode(gpu, on)).unwrap(), "not pending");
}

/// The mock NVML's switch that makes GPU `gpu`'s MIG mode changes wait for a reset.
fn needs_reset(root: &Path, gpu: usize) -> PathBuf {
    let loc = gpuhook_node::NvmlLocation::locate(root, None).unwrap();
    let inv = gpuhook_node::discover(&DiscoverOptions::for_root(root))
        .unwrap()
        .inventory;
    // `gpuhook_sim::mig_state::needs_reset_file`.
    loc.path()
        .parent()
        .unwrap()
        .join("gpuhook-sim-state")
        .join(format!("mig-needs-reset-{}", inv.gpus[gpu].uuid))
}

fn gpu_claim(api: &ApiServer, uid: &str, device: &str) -> ClaimRef {
    api.add_claim(claim("ns", uid, uid, NODE, &[("gpu", device)], vec![]));
    ClaimRef {
        namespace: "ns".into(),
        name: uid.into(),
        uid: uid.into(),
    }
}

/// An H100 with MIG mode off: the full GPU and every placement are published; a full-GPU claim
/// is prepared as the GPU (its device node, MIG mode untouched); a placement claim then switches
/// MIG mode on and creates its device, and its unprepare destroys it and switches MIG mode off.
/// The plugin's own switches publish nothing new.
#[tokio::test]
async fn h100_with_mig_off_serves_the_full_gpu_and_switches_mig_for_placements() {
    let dir = tempfile::tempdir().unwrap();
    let Some(root) = sim_node(dir.path(), "h100-mig-empty") else {
        return;
    };
    set_mode(&root, 0, false);
    assert_eq!(mode(&root, 0), (false, false));
    let api = ApiServer::start(NODE);
    let p = start(dir.path(), &api, &root);
    wait_for("slices", || api.slices().len() == 2).await;
    let (sets, names) = published(&api);
    assert_eq!(sets.len(), 1);
    assert_eq!(sets[0]["name"], "gpu-0-counter-set");
    assert_eq!(sets[0]["counters"]["compute-slices"]["value"], "7");
    assert!(names.contains("gpu-0"), "{names:?}");
    // NVIDIA's H100 80GB placements (MIG user guide), named as in MIG mode.
    for n in [
        "gpu-0-mig-1g10gb-19-6",
        "gpu-0-mig-1g20gb-15-4",
        "gpu-0-mig-3g40gb-9-4",
        "gpu-0-mig-7g80gb-0-0",
    ] {
        assert!(names.contains(n), "{n}: {names:?}");
    }
    let generation = |api: &ApiServer| api.slices()[0]["spec"]["pool"]["generation"].clone();
    let first = generation(&api);

    let full = gpu_claim(&api, "uid-full", "gpu-0");
    let devs = p.driver.prepare(&full).await.unwrap();
    assert_eq!(
        devs[0].cdi_device_ids,
        ["k8s.gpu.nvidia.com/claim=uid-full-gpu-0"]
    );
    assert_eq!(mode(&root, 0), (false, false), "MIG mode stays off");
    assert!(instances(&root).is_empty());
    let spec = std::fs::read_to_string(&specs(dir.path())[0]).unwrap();
    assert!(spec.contains("/dev/nvidia0"), "{spec}");
    assert!(!spec.contains("nvidia-cap"), "{spec}");
    // A placement allocated while the full GPU is prepared (the counters forbid it; a stale
    // allocation) fails alone: MIG mode is not switched on under the full GPU's claim.
    let stale = mig_claim(&api, "uid-stale", "gpu-0-mig-1g10gb-19-0");
    let err = p.driver.prepare(&stale).await.unwrap_err().to_string();
    assert!(err.contains("uid-full"), "{err}");
    assert_eq!(mode(&root, 0), (false, false));
    p.driver.unprepare("uid-full").await.unwrap();

    let c = mig_claim(&api, "uid-m", "gpu-0-mig-3g40gb-9-4");
    p.driver.prepare(&c).await.unwrap();
    assert_eq!(mode(&root, 0), (true, true), "MIG mode switched on");
    assert_eq!(instances(&root), [(9, 4)]);
    let spec = std::fs::read_to_string(&specs(dir.path())[0]).unwrap();
    assert!(spec.contains("nvidia-caps/nvidia-cap"), "{spec}");
    p.driver.unprepare("uid-m").await.unwrap();
    assert!(instances(&root).is_empty());
    assert_eq!(
        mode(&root, 0),
        (false, false),
        "switched off with its last device"
    );

    // The catalogue read now equals the published one: nothing was re-published for the switches.
    let rescanned = gpuhook_dra::partition::read(
        p.driver.partitioner().as_ref().unwrap(),
        Vec::new,
        &gpuhook_node::discover(&DiscoverOptions::for_root(&root))
            .unwrap()
            .inventory,
        Path::new("/nonexistent"),
    )
    .unwrap();
    let again: std::collections::BTreeSet<String> =
        rescanned.iter().map(|d| d.name.clone()).collect();
    assert_eq!(published(&api).1, again);
    assert_eq!(generation(&api), first);
    p.stop().await;
}

/// An H100 in MIG mode that someone else holds a MIG device on: the full GPU cannot be prepared
/// (the claim fails alone, MIG mode untouched); once the device is gone the full GPU switches
/// MIG mode off. A placement on a GPU whose MIG mode the plugin did not switch on leaves it on.
#[tokio::test]
async fn h100_in_mig_mode_switches_off_for_the_full_gpu_only_without_mig_devices() {
    let dir = tempfile::tempdir().unwrap();
    let Some(root) = sim_node(dir.path(), "h100-mig-empty") else {
        return;
    };
    let api = ApiServer::start(NODE);
    let p = start(dir.path(), &api, &root);
    let c = mig_claim(&api, "uid-m", "gpu-0-mig-1g10gb-19-0");
    p.driver.prepare(&c).await.unwrap();
    p.driver.unprepare("uid-m").await.unwrap();
    assert_eq!(
        mode(&root, 0),
        (true, true),
        "not switched on by the plugin: left on"
    );

    let admin = gpuhook_dra::run::partitioner(&DiscoverOptions::for_root(&root)).unwrap();
    admin
        .with(|b| gpuhook_mig::create_instance(b, 0, "1g.10gb", Some(6)))
        .unwrap();
    let full = gpu_claim(&api, "uid-full", "gpu-0");
    let err = p.driver.prepare(&full).await.unwrap_err().to_string();
    assert!(err.contains("MIG device(s)"), "{err}");
    assert_eq!(mode(&root, 0), (true, true));
    assert_eq!(instances(&root), [(19, 6)]);
    assert!(specs(dir.path()).is_empty());
    let gi = admin.with(|b| b.gpu(0)).unwrap().instances[0].id;
    admin
        .with(|b| gpuhook_mig::destroy_instance(b, 0, gi, &gpuhook_mig::NoHolders, false))
        .unwrap();
    p.driver.prepare(&full).await.unwrap();
    assert_eq!(
        mode(&root, 0),
        (false, false),
        "switched off for the full GPU"
    );
    p.driver.unprepare("uid-full").await.unwrap();
    p.stop().await;
}

/// An A100 in MIG mode that needs a reset to leave it: its full GPUs are not published, its
/// placements and counter sets are. The mode stays as it is.
#[tokio::test]
async fn a100_in_mig_mode_that_needs_a_reset_publishes_placements_only() {
    let dir = tempfile::tempdir().unwrap();
    let Some(root) = sim_node(dir.path(), "a100-mig-mixed") else {
        return;
    };
    for gpu in 0..2 {
        let switch = needs_reset(&root, gpu);
        std::fs::create_dir_all(switch.parent().unwrap()).unwrap();
        std::fs::write(switch, "").unwrap();
    }
    // Free GPU 0 (the MIG manager's devices destroyed) so its placements are offered.
    let admin = gpuhook_dra::run::partitioner(&DiscoverOptions::for_root(&root)).unwrap();
    for gi in admin.with(|b| b.gpu(0)).unwrap().instances {
        admin
            .with(|b| gpuhook_mig::destroy_instance(b, 0, gi.id, &gpuhook_mig::NoHolders, false))
            .unwrap();
    }
    let api = ApiServer::start(NODE);
    let p = start(dir.path(), &api, &root);
    wait_for("slices", || api.slices().len() == 2).await;
    let (sets, names) = published(&api);
    assert_eq!(sets.len(), 2, "both counter sets");
    assert_eq!(sets[0]["counters"]["compute-slices"]["value"], "7");
    assert!(
        !names.contains("gpu-0") && !names.contains("gpu-1"),
        "{names:?}"
    );
    assert!(names.contains("gpu-0-mig-7g80gb-0-0"), "{names:?}");
    assert!(names.contains("gpu-0-mig-1g10gb-19-6"), "{names:?}");
    // A claim for the unpublished full GPU fails alone, the mode untouched.
    let full = gpu_claim(&api, "uid-full", "gpu-0");
    let err = p.driver.prepare(&full).await.unwrap_err().to_string();
    assert!(err.contains("without a reset"), "{err}");
    assert_eq!(mode(&root, 0), (true, true));
    // A placement is made as on any GPU in MIG mode, and destroyed; MIG mode stays on.
    let c = mig_claim(&api, "uid-m", "gpu-0-mig-3g40gb-9-0");
    p.driver.prepare(&c).await.unwrap();
    assert_eq!(instances_of(&root, 0), [(9, 0)]);
    p.driver.unprepare("uid-m").await.unwrap();
    assert!(instances_of(&root, 0).is_empty());
    assert_eq!(mode(&root, 0), (true, true));
    p.stop().await;
}

/// A GPU the plugin switched on whose MIG devices went while the plugin was down (here: its
/// claim's device destroyed by hand and the claim gone from the checkpoint) is switched off at
/// the next start; its mark is what says the plugin switched it on.
#[tokio::test]
async fn a_gpu_switched_on_and_left_empty_while_down_is_switched_off_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let Some(root) = sim_node(dir.path(), "h100-mig-empty") else {
        return;
    };
    set_mode(&root, 0, false);
    let api = ApiServer::start(NODE);
    let p = start(dir.path(), &api, &root);
    let c = mig_claim(&api, "uid-m", "gpu-0-mig-1g10gb-19-2");
    p.driver.prepare(&c).await.unwrap();
    p.stop().await;
    assert_eq!(mode(&root, 0), (true, true));
    let admin = gpuhook_dra::run::partitioner(&DiscoverOptions::for_root(&root)).unwrap();
    let gi = admin.with(|b| b.gpu(0)).unwrap().instances[0].id;
    admin
        .with(|b| gpuhook_mig::destroy_instance(b, 0, gi, &gpuhook_mig::NoHolders, false))
        .unwrap();
    let cp_path = dir.path().join("plugin/checkpoint.json");
    let mut cp: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&cp_path).unwrap()).unwrap();
    cp["claims"]
        .as_object_mut()
        .unwrap()
        .remove("uid-m")
        .unwrap();
    std::fs::write(&cp_path, serde_json::to_vec(&cp).unwrap()).unwrap();

    let p = start(dir.path(), &api, &root);
    let root2 = root.clone();
    wait_for("MIG mode switched off", move || {
        mode(&root2, 0) == (false, false)
    })
    .await;
    p.stop().await;
}
