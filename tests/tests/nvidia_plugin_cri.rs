//! NVIDIA's k8s-device-plugin in front of gpuhook (issue 16 item 9): its Allocate responses,
//! built exactly as v0.20.0 builds them (shared/reference/kdp-facts.md §5,
//! `internal/plugin/server.go:getAllocateResponse`), turned into a CRI `CreateContainer` the way
//! the kubelet does (`device_plugin_cri_support/kubelet.rs`) and run by containerd 1.6's CRI
//! plugin with the `gpuhook` runtime handler (gpuhook-runtime), on a simulated node. NVIDIA's
//! plugin itself is not run: no Go toolchain or image is here, and its answer is a pure function
//! of the IDs and the config, written down in kdp-facts §5.
//!
//! - envvar (its default): `Envs = {NVIDIA_VISIBLE_DEVICES: <uuid,…>}` and nothing else
//!   (passDeviceSpecs defaults to false): the container gets exactly those GPUs.
//! - volume-mounts: `NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices` and a `/dev/null`
//!   mount per ID there, for nodes that refuse the env var from unprivileged containers.
//! - migStrategy `none` on a MIG-enabled GPU: the GPU is advertised whole
//!   (`buildGPUDeviceMap` skips MIG-enabled GPUs only for single/mixed), so the answer names the
//!   MIG-enabled GPU's UUID: the container gets that GPU's `/dev/nvidia<minor>` and no MIG
//!   capability node (as libnvidia-container gives a MIG-enabled GPU selected whole; MIG access
//!   needs NVIDIA_MIG_CONFIG_DEVICES/NVIDIA_MIG_MONITOR_DEVICES, privileged only).
//! - cdi-annotations: one annotation `cdi.k8s.io/nvidia-device-plugin_<uuid4>` =
//!   `k8s.device-plugin.nvidia.com/gpu=<uuid>` and no env (`getCDIDeviceAnnotations`). Names of that
//!   kind need a spec of that kind: `gpuhook cdi generate --vendor k8s.device-plugin.nvidia.com
//!   --class gpu` writes one whose devices are named by index and UUID, as NVIDIA's
//!   deviceIDStrategy names them; gpuhook-runtime (`cdi` mode) applies it.
//!
//! Run under `flock /tmp/gpuhook-e2e.lock`; containerd, its pods and mounts go on drop.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test crate: a panic is a test failure

mod cdi_support;
mod device_plugin_cri_support;

use std::collections::HashMap;

use cdi_support::{gpuhook_ok, s};
use device_plugin_cri_support::rig::{ready, tmp, Bench};
use gpuhook_device_plugin::api::{ContainerAllocateResponse, Mount};

/// NVIDIA's envvar answer for `ids` (deviceIDStrategy uuid, no passDeviceSpecs).
fn envvar_response(ids: &[&str]) -> ContainerAllocateResponse {
    ContainerAllocateResponse {
        envs: HashMap::from([("NVIDIA_VISIBLE_DEVICES".into(), ids.join(","))]),
        ..Default::default()
    }
}

/// `nvidia.com/gpu: 2` on an 8-GPU node with NVIDIA's default strategy: exactly those two GPUs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nvidia_envvar_strategy_gives_exactly_its_gpus() {
    if !ready("nvidia_plugin_cri") {
        return;
    }
    let tmp = tmp("kdp-envvar");
    let mut bench = Bench::start(tmp.path(), "dgx-h100", &[]).await;
    let gpus = &bench.node.profile.gpus;
    let ids = [gpus[2].uuid.clone(), gpus[5].uuid.clone()];
    let resp = envvar_response(&[&ids[0], &ids[1]]);
    let saw = bench.run("kdp-envvar", &[resp]).await;
    assert_eq!(saw.gpu_nodes(), bench.only_gpus(&[2, 5]), "{saw:?}");
}

/// A node that refuses `NVIDIA_VISIBLE_DEVICES` from unprivileged containers and reads the
/// volume-mounts list: NVIDIA's envvar answer gives no GPU, its volume-mounts answer
/// (`NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices`, one `/dev/null` mount per ID)
/// gives exactly its GPU.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nvidia_volume_mounts_strategy_when_envvar_is_refused() {
    if !ready("nvidia_plugin_cri") {
        return;
    }
    let tmp = tmp("kdp-volume-mounts");
    let mut bench = Bench::start(tmp.path(), "rhel-a100", &[]).await;
    let config = std::fs::read_to_string(&bench.node.gpuhook_config).unwrap();
    let policy =
        "accept-envvar-when-unprivileged = false\naccept-device-list-as-volume-mounts = true\n";
    std::fs::write(&bench.node.gpuhook_config, format!("{policy}{config}")).unwrap();
    let uuid = bench.node.profile.gpus[1].uuid.clone();

    let saw = bench
        .run("kdp-envvar-refused", &[envvar_response(&[&uuid])])
        .await;
    assert!(saw.gpu_nodes().is_empty(), "envvar refused: {saw:?}");

    let root = "/var/run/nvidia-container-devices";
    let resp = ContainerAllocateResponse {
        envs: HashMap::from([("NVIDIA_VISIBLE_DEVICES".into(), root.into())]),
        mounts: vec![Mount {
            container_path: format!("{root}/{uuid}"),
            host_path: "/dev/null".into(),
            read_only: false,
        }],
        ..Default::default()
    };
    let saw = bench.run("kdp-volume-mounts", &[resp]).await;
    assert_eq!(saw.gpu_nodes(), bench.only_gpus(&[1]), "{saw:?}");
}

/// migStrategy none hands out a MIG-enabled GPU's UUID (issue #13): the whole GPU, no MIG caps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nvidia_mig_strategy_none_gives_the_mig_enabled_gpu_whole() {
    if !ready("nvidia_plugin_cri") {
        return;
    }
    let tmp = tmp("kdp-mig-none");
    let mut bench = Bench::start(tmp.path(), "a100-mig-mixed", &[]).await;
    let gpu = &bench.node.profile.gpus[1];
    assert!(
        gpu.mig_mode && !gpu.mig_devices.is_empty(),
        "a MIG-enabled GPU"
    );
    let resp = envvar_response(&[&gpu.uuid.clone()]);
    let saw = bench.run("kdp-mig-none", &[resp]).await;
    // Exactly GPU 1's node: no /dev/nvidia-caps/* node of any MIG device, no other GPU.
    assert_eq!(saw.gpu_nodes(), bench.only_gpus(&[1]), "{saw:?}");
}

/// NVIDIA's cdi-annotations answer, with gpuhook's spec of NVIDIA's vendor/class in one of
/// gpuhook-runtime's spec dirs: in its `cdi` mode (the default) gpuhook-runtime applies
/// `cdi.k8s.io/*` container annotations of any kind (`hook/src/wrapper/request.rs`), as a CDI
/// runtime (containerd >= 1.7 with enable_cdi) applies NVIDIA's own spec: the container gets
/// exactly that GPU. (The `legacy` mode's prestart hook reads `nvidia.com/gpu` and
/// `nvidia.com/gpu-mps` names only.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nvidia_cdi_annotations_with_gpuhooks_spec_of_nvidias_kind() {
    if !ready("nvidia_plugin_cri") {
        return;
    }
    let tmp = tmp("kdp-cdi");
    let kdp_specs = tmp.path().join("kdp-cdi");
    let mut bench = Bench::start(tmp.path(), "rhel-a100", &[&kdp_specs]).await;
    gpuhook_ok(&[
        "cdi",
        "generate",
        "--driver-root",
        s(&bench.node.root),
        "--vendor",
        "k8s.device-plugin.nvidia.com",
        "--class",
        "gpu",
        "--output",
        s(&kdp_specs.join("k8s.device-plugin.nvidia.com-gpu.json")),
        "--no-inventory-cache",
    ]);
    // deviceIDStrategy uuid (NVIDIA's default), then index: both name forms resolve.
    let uuid = bench.node.profile.gpus[1].uuid.clone();
    for (pod, id, g) in [
        ("kdp-cdi-uuid", uuid.as_str(), 1),
        ("kdp-cdi-index", "0", 0),
    ] {
        let resp = ContainerAllocateResponse {
            annotations: HashMap::from([(
                "cdi.k8s.io/nvidia-device-plugin_3b0c9a5e-6f1d-4e2a-9c7b-1d2e3f405162".into(),
                format!("k8s.device-plugin.nvidia.com/gpu={id}"),
            )]),
            ..Default::default()
        };
        let saw = bench.run(pod, &[resp]).await;
        assert_eq!(saw.gpu_nodes(), bench.only_gpus(&[g]), "{id}: {saw:?}");
    }
}

/// No test writes the node's own inventory cache (#22: this file's CDI test once replaced
/// `/var/run/gpuhook/inventory.json` with its temp node's): the `gpuhook` helper refuses a
/// `cdi generate|refresh` that would, and a generate as the tests run it leaves the real cache
/// as it was.
#[test]
fn tests_never_write_the_nodes_inventory_cache() {
    use crate::cdi_support::{refuse_real_paths, REAL_INVENTORY_CACHE};
    let refused = |args: &[&str]| std::panic::catch_unwind(|| refuse_real_paths(args)).is_err();
    assert!(refused(&[
        "cdi",
        "generate",
        "--driver-root",
        "/x",
        "--output",
        "-"
    ]));
    assert!(refused(&[
        "cdi",
        "generate",
        "--driver-root",
        "/x",
        "--no-inventory-cache"
    ]));
    assert!(refused(&[
        "cdi",
        "refresh",
        "--driver-root",
        "/x",
        "--output",
        "/tmp/x"
    ]));
    assert!(!refused(&[
        "cdi",
        "generate",
        "--output",
        "-",
        "--no-inventory-cache"
    ]));
    assert!(!refused(&[
        "cdi",
        "generate",
        "-o",
        "/t/s.json",
        "--inventory-cache",
        "/t/i"
    ]));
    assert!(!refused(&["cdi", "generate", "--help"]));
    assert!(!refused(&["cdi", "list"]));
    if !ready("nvidia_plugin_cri") {
        return;
    }
    let tmp = tmp("real-cache");
    let root = tmp.path().join("driver");
    crate::cdi_support::build_node("rhel-a100", &root);
    let out = tmp.path().join("spec.json");
    gpuhook_ok(&[
        "cdi",
        "generate",
        "--driver-root",
        s(&root),
        "--output",
        s(&out),
        "--no-inventory-cache",
    ]);
    assert!(out.is_file());
    // What the regression left: a real cache naming a test's temp driver root. (Compared by
    // content, not mtime: the node's own gpuhook may rewrite its cache meanwhile.)
    let real = std::fs::read_to_string(REAL_INVENTORY_CACHE).unwrap_or_default();
    assert!(
        !real.contains(s(&root)),
        "{REAL_INVENTORY_CACHE} names this test's node"
    );
}
