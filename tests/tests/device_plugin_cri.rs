//! The device plugin end to end as a node runs it: `gpuhook-device-plugin serve` on a simulated
//! node registers with a fake kubelet (the device manager's steps: Register, ListAndWatch,
//! GetPreferredAllocation, Allocate), each Allocate response becomes a CRI `CreateContainer`
//! request the way the kubelet builds it (see `device_plugin_cri_support/kubelet.rs` for each
//! behaviour and its source), sent to a real containerd 1.6 CRI plugin whose `gpuhook` runtime
//! handler runs `gpuhook-runtime`, and the container reports what it got: its `/dev/nvidia*`
//! nodes (ENXIO: allowed by the device cgroup; EPERM: denied; shared/reference/testing-notes.md)
//! and its NVIDIA_/CUDA_ env.
//!
//! Not covered here: the cdi-cri strategy (`CDIDevices` in the CRI request) needs containerd 1.7
//! with `enable_cdi`; containerd 1.6 ignores the field, so a container would get nothing. Its
//! names are resolved by a real CDI consumer (podman) in `device_plugin_cdi_names.rs`.
//!
//! Run under `flock /tmp/gpuhook-e2e.lock` (a private containerd, mounts, shims); everything is
//! removed on drop. Needs root, containerd, ctr, runc and static busybox; with
//! GPUHOOK_REQUIRE_E2E=1 a missing one fails the test instead of skipping it.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test crate: a panic is a test failure

mod cdi_support;
mod device_plugin_cri_support;

use std::time::Duration;

use device_plugin_cri_support::rig::{ready, Rig};
use device_plugin_cri_support::{Node, Resource};
use gpuhook_device_plugin::api::ContainerAllocateResponse;

const ENVVAR: &str = "version: v1\nflags:\n  plugin:\n    deviceListStrategy: envvar\n";
const CDI_ANNOTATIONS: &str =
    "version: v1\nflags:\n  plugin:\n    deviceListStrategy: cdi-annotations\n";

/// `nvidia.com/gpu: 1` on a 2-GPU node, first with the envvar strategy, then, after the node's
/// `nvidia.com/device-plugin.config` label switches to a config with cdi-annotations (applied
/// without a restart of the plugin), through a `cdi.k8s.io/*` annotation. Each container has
/// exactly its GPU.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_gpu_envvar_then_cdi_annotations_by_node_label() {
    if !ready("device_plugin_cri") {
        return;
    }
    let configs = [("default", ENVVAR), ("cdi", CDI_ANNOTATIONS)];
    let mut rig = Rig::start("rhel-a100", &configs, "").await;
    let mut gpu = rig.resource("nvidia.com/gpu").await;
    assert_eq!(gpu.devices.len(), 2, "{:?}", gpu.devices);

    let resp = gpu.allocate(1).await.unwrap();
    let id = gpu.allocated[0].clone();
    let g = rig.bench.gpu_of(&id);
    assert_eq!(resp.envs.get("NVIDIA_VISIBLE_DEVICES"), Some(&id));
    let saw = rig.run("envvar", &[resp]).await;
    assert_eq!(saw.gpu_nodes(), rig.bench.only_gpus(&[g]), "{saw:?}");
    // The CDI spec's common edits set `NVIDIA_VISIBLE_DEVICES=void` (as nvidia-ctk's do) so a
    // legacy hook further down does not act a second time: the request was consumed.
    assert_eq!(
        saw.env.get("NVIDIA_VISIBLE_DEVICES").map(String::as_str),
        Some("void")
    );

    std::fs::write(&rig.label, "cdi").unwrap();
    let resp = wait_for_annotation(&mut gpu).await.unwrap_or_else(|| {
        panic!(
            "the label switch to the cdi config was not applied within 10 s:\n{}",
            rig.plugin.log_text()
        )
    });
    let other = gpu.available()[0].clone();
    assert!(resp.envs.is_empty(), "cdi-annotations only: {resp:?}");
    let saw = rig.run("cdi-annotations", &[resp]).await;
    let g2 = rig.bench.gpu_of(&other);
    assert_ne!(g, g2);
    assert_eq!(saw.gpu_nodes(), rig.bench.only_gpus(&[g2]), "{saw:?}");
    assert_eq!(
        saw.env.get("NVIDIA_VISIBLE_DEVICES").map(String::as_str),
        Some("void")
    );
}

/// Allocates the next free GPU until the answer carries a `cdi.k8s.io/` annotation (the config
/// switch is picked up within the plugin's poll interval); a bounded wait.
async fn wait_for_annotation(gpu: &mut Resource) -> Option<ContainerAllocateResponse> {
    let id = gpu.available()[0].clone();
    for _ in 0..100 {
        let resp = gpu.allocate_ids(std::slice::from_ref(&id)).await.unwrap();
        if let Some((k, v)) = resp.annotations.iter().next() {
            assert!(k.starts_with("cdi.k8s.io/"), "{k}");
            assert_eq!(v, &format!("nvidia.com/gpu={id}"));
            return Some(resp);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

/// (GPU, MIG index) of a MIG device UUID.
fn mig_of(node: &Node, uuid: &str) -> (usize, usize) {
    for (g, gpu) in node.profile.gpus.iter().enumerate() {
        if let Some(m) = gpu.mig_devices.iter().position(|d| d.uuid == uuid) {
            return (g, m);
        }
    }
    panic!("{uuid} is no MIG device of the node");
}

/// `migStrategy: mixed` on an A100 node with MIG devices: `nvidia.com/mig-1g.10gb: 1` gives the
/// container its MIG device: the parent GPU's node and the device's two capability nodes
/// (`nvidia-caps` GI and CI access), nothing of the other GPU or the other MIG devices.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_mig_device_through_cri() {
    if !ready("device_plugin_cri") {
        return;
    }
    let mixed = "version: v1\nflags:\n  migStrategy: mixed\n";
    let mut rig = Rig::start("a100-mig-mixed", &[("default", mixed)], "").await;
    let mut mig = rig.resource("nvidia.com/mig-1g.10gb").await;
    let want_count = rig
        .bench
        .node
        .profile
        .gpus
        .iter()
        .flat_map(|g| &g.mig_devices)
        .filter(|d| d.profile == "1g.10gb")
        .count();
    assert_eq!(mig.devices.len(), want_count, "{:?}", mig.devices);
    let resp = mig.allocate(1).await.unwrap();
    let id = mig.allocated[0].clone();
    assert_eq!(resp.envs.get("NVIDIA_VISIBLE_DEVICES"), Some(&id));
    let (g, m) = mig_of(&rig.bench.node, &id);
    let saw = rig.run("mig", &[resp]).await;
    let mut want = rig.bench.only_gpus(&[g]);
    for cap in rig.bench.node.mig_caps(g, m) {
        want.insert(cap, "ENXIO".into());
    }
    assert_eq!(saw.gpu_nodes(), want, "{saw:?}");
}

/// The seed's ConfigMap: one key per node type, `nvidia.com/device-plugin.config` picks it.
fn seed_configs() -> Vec<(&'static str, String)> {
    let ts = |n: u32| {
        format!(
            "version: v1\nflags:\n  migStrategy: none\nsharing:\n  timeSlicing:\n    renameByDefault: false\n    failRequestsGreaterThanOne: true\n    resources:\n    - name: nvidia.com/gpu\n      replicas: {n}\n"
        )
    };
    vec![("default", ts(2)), ("l20", ts(8)), ("t4", ts(3))]
}

/// One seed node: its replicas are advertised, one slot runs a container that gets the GPU, a
/// request of 2 shared slots is refused by the plugin (failRequestsGreaterThanOne), and once
/// every slot is taken the kubelet itself refuses one more. Returns the number of slots.
async fn seed_node(profile: &str, label: &str) -> usize {
    let configs = seed_configs();
    let configs: Vec<(&str, &str)> = configs.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut rig = Rig::start(profile, &configs, label).await;
    let mut gpu = rig.resource("nvidia.com/gpu").await;
    let slots = gpu.devices.len();
    assert!(
        gpu.devices.keys().all(|id| id.contains("::")),
        "{:?}",
        gpu.devices
    );

    let err = gpu.allocate(2).await.unwrap_err();
    assert!(
        err.contains("maximum request size for shared resources is 1; found 2"),
        "{err}"
    );
    let resp = gpu.allocate(1).await.unwrap();
    let g = rig.bench.gpu_of(&gpu.allocated[0]);
    let saw = rig.run(&format!("{label}-slot"), &[resp]).await;
    assert_eq!(saw.gpu_nodes(), rig.bench.only_gpus(&[g]), "{saw:?}");
    while !gpu.available().is_empty() {
        gpu.allocate(1).await.unwrap();
    }
    let err = gpu.allocate(1).await.unwrap_err();
    assert!(
        err.contains("Requested: 1, Available: 0"),
        "kubelet admission: {err}"
    );
    let err = gpu
        .allocate_ids(&["GPU-00000000-0000-0000-0000-000000000000::0".into()])
        .await
        .unwrap_err();
    assert!(err.contains("unknown device"), "{err}");
    slots
}

/// The seed scenario: an L20 node labelled `l20` (8 replicas) and a T4 node labelled `t4` (3),
/// from one ConfigMap: 11 schedulable `nvidia.com/gpu` slots; each slot runs a real container.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_time_slicing_l20_and_t4_by_node_label_give_11_slots() {
    if !ready("device_plugin_cri") {
        return;
    }
    let l20 = seed_node("l20", "l20").await;
    let t4 = seed_node("t4", "t4").await;
    assert_eq!((l20, t4), (8, 3));
    assert_eq!(l20 + t4, 11);
}

/// A critical Xid on one GPU of a 2-GPU node (injected through the mock NVML's events file, as
/// the simulator documents: `xid <uuid> <xid>` in `<libdir>/gpuhook-sim-state/events`): the
/// plugin's ListAndWatch marks it Unhealthy, the kubelet no longer offers it, and the pod gets
/// the healthy GPU.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unhealthy_gpu_is_no_longer_allocated() {
    if !ready("device_plugin_cri") {
        return;
    }
    let mut rig = Rig::start("rhel-a100", &[("default", ENVVAR)], "").await;
    let mut gpu = rig.resource("nvidia.com/gpu").await;
    let bad = rig.bench.node.profile.gpus[0].uuid.clone();
    let events = rig
        .bench
        .node
        .root
        .join(rig.bench.node.profile.lib_dir.trim_start_matches('/'))
        .join("gpuhook-sim-state/events");
    std::fs::create_dir_all(events.parent().unwrap()).unwrap();
    // Xid 48 (double-bit ECC) is critical: not in NVIDIA's default-ignored 13, 31, 43, 45, 68, 109.
    std::fs::write(&events, format!("xid {bad} 48\n")).unwrap();
    let marked = gpu
        .wait_list(Duration::from_secs(60), |d| {
            d.get(&bad).map(String::as_str) == Some("Unhealthy")
        })
        .await;
    // (A hang guard, not a latency goal: scripts/bench-device-plugin.sh measures Xid to
    // ListAndWatch; a loaded CI machine must not fail this on a slow second.)
    assert!(
        marked,
        "{bad} not marked Unhealthy within 60 s: {:?}\n{}",
        gpu.devices,
        rig.plugin.log_text()
    );
    assert_eq!(
        gpu.available(),
        [rig.bench.node.profile.gpus[1].uuid.clone()]
    );
    let resp = gpu.allocate(1).await.unwrap();
    let saw = rig.run("healthy", &[resp]).await;
    assert_eq!(saw.gpu_nodes(), rig.bench.only_gpus(&[1]), "{saw:?}");
    let err = gpu.allocate(1).await.unwrap_err();
    assert!(err.contains("Requested: 1, Available: 0"), "{err}");
}
