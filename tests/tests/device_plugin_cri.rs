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
//! with `enable_cdi`; containerd 1.6 ignores the field, so a container would get nothing.
//!
//! Run under `flock /tmp/gpuhook-e2e.lock` (a private containerd, mounts, shims); everything is
//! removed on drop. Needs root, containerd, ctr, runc and static busybox; with
//! GPUHOOK_REQUIRE_E2E=1 a missing one fails the test instead of skipping it.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test crate: a panic is a test failure

mod cdi_support;
mod device_plugin_cri_support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use device_plugin_cri_support::cri::Cri;
use device_plugin_cri_support::fake_kubelet::FakeKubelet;
use device_plugin_cri_support::kubelet::{container_config, run_options};
use device_plugin_cri_support::{seen, Node, Plugin, Resource, Seen, REPORT};
use gpuhook_device_plugin::api::ContainerAllocateResponse;

const TOOLS: &[&str] = &["containerd", "ctr", "runc", "busybox", "tar", "sha256sum"];

/// A node with its device plugin, the fake kubelet and containerd's CRI.
struct Rig {
    // Dropped in this order: the plugin (SIGTERM), containerd (pods, shims, mounts), the dirs.
    plugin: Plugin,
    kubelet: FakeKubelet,
    cri: Cri,
    node: Node,
    label: PathBuf,
    _tmp: tempfile::TempDir,
}

/// The named configs of one ConfigMap (seed scenario: `time-slicing-config` with one key per
/// node type, plus `default`), written as a ConfigMap volume is: one file per key.
fn config_dir(dir: &Path, configs: &[(&str, &str)]) -> PathBuf {
    let d = dir.join("config");
    std::fs::create_dir_all(&d).unwrap();
    for (name, text) in configs {
        std::fs::write(d.join(name), text).unwrap();
    }
    d
}

impl Rig {
    /// Node `profile`, configs `configs` (a ConfigMap dir), node label value `label`.
    async fn start(profile: &str, configs: &[(&str, &str)], label: &str) -> Rig {
        let tmp = tempfile::Builder::new()
            .prefix(&format!("gpuhook-dpcri-{profile}-"))
            .tempdir()
            .unwrap();
        Self::start_in(tmp, profile, configs, label, &[]).await
    }

    async fn start_in(
        tmp: tempfile::TempDir,
        profile: &str,
        configs: &[(&str, &str)],
        label: &str,
        extra_spec_dirs: &[&Path],
    ) -> Rig {
        let dir = tmp.path();
        let node = Node::new(dir, profile, extra_spec_dirs);
        let cri = Cri::start(dir, &node.gpuhook_config).await;
        let plugin_dir = dir.join("device-plugins");
        std::fs::create_dir_all(&plugin_dir).unwrap();
        let kubelet = FakeKubelet::start(&plugin_dir);
        let cfg = config_dir(dir, configs);
        let label_file = dir.join("node-label");
        std::fs::write(&label_file, label).unwrap();
        let plugin = Plugin::start(&node, &cfg, &label_file, &plugin_dir);
        Rig {
            plugin,
            kubelet,
            cri,
            node,
            label: label_file,
            _tmp: tmp,
        }
    }

    /// The next registered resource named `name` (others are skipped), with its first list.
    async fn resource(&mut self, name: &str) -> Resource {
        loop {
            let reg =
                tokio::time::timeout(Duration::from_secs(20), self.kubelet.registrations.recv())
                    .await
                    .unwrap_or_else(|_| {
                        panic!("{name} never registered:\n{}", self.plugin.log_text())
                    })
                    .expect("kubelet stopped");
            if reg.request.resource_name == name {
                return Resource::new(reg).await;
            }
        }
    }

    /// Runs a pod whose one container got `responses` and reports what it saw.
    async fn run(&mut self, pod: &str, responses: &[ContainerAllocateResponse]) -> Seen {
        let config = container_config("gpu", REPORT, run_options(responses));
        let ran = self.cri.run(pod, config).await;
        assert_eq!(
            ran.exit_code,
            0,
            "container failed:\n{}\ngpuhook log:\n{}",
            ran.log,
            std::fs::read_to_string(&self.node.gpuhook_log).unwrap_or_default()
        );
        seen(&ran.log)
    }
}

fn ready() -> bool {
    gpuhook_e2e::e2e_ready("device_plugin_cri", TOOLS)
}

/// The GPU index of a full-GPU device ID (`<uuid>` or `<uuid>::<n>`).
fn gpu_of(node: &Node, id: &str) -> usize {
    let uuid = id.split("::").next().unwrap();
    node.profile
        .gpus
        .iter()
        .position(|g| g.uuid == uuid)
        .unwrap_or_else(|| panic!("{id} is no GPU of the node"))
}

/// Exactly this GPU's node, allowed.
fn only_gpu(node: &Node, g: usize) -> BTreeMap<String, String> {
    BTreeMap::from([(node.gpu_node(g), "ENXIO".to_string())])
}

const ENVVAR: &str = "version: v1\nflags:\n  plugin:\n    deviceListStrategy: envvar\n";
const CDI_ANNOTATIONS: &str =
    "version: v1\nflags:\n  plugin:\n    deviceListStrategy: cdi-annotations\n";

/// `nvidia.com/gpu: 1` on a 2-GPU node, first with the envvar strategy, then, after the node's
/// `nvidia.com/device-plugin.config` label switches to a config with cdi-annotations (applied
/// without a restart of the plugin), through a `cdi.k8s.io/*` annotation. Each container has
/// exactly its GPU.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_gpu_envvar_then_cdi_annotations_by_node_label() {
    if !ready() {
        return;
    }
    let configs = [("default", ENVVAR), ("cdi", CDI_ANNOTATIONS)];
    let mut rig = Rig::start("rhel-a100", &configs, "").await;
    let mut gpu = rig.resource("nvidia.com/gpu").await;
    assert_eq!(gpu.devices.len(), 2, "{:?}", gpu.devices);

    let resp = gpu.allocate(1).await.unwrap();
    let id = gpu.allocated[0].clone();
    let g = gpu_of(&rig.node, &id);
    assert_eq!(resp.envs.get("NVIDIA_VISIBLE_DEVICES"), Some(&id));
    let saw = rig.run("envvar", &[resp]).await;
    assert_eq!(saw.gpu_nodes(), only_gpu(&rig.node, g), "{saw:?}");
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
    let g2 = gpu_of(&rig.node, &other);
    assert_ne!(g, g2);
    assert_eq!(saw.gpu_nodes(), only_gpu(&rig.node, g2), "{saw:?}");
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
    if !ready() {
        return;
    }
    let mixed = "version: v1\nflags:\n  migStrategy: mixed\n";
    let mut rig = Rig::start("a100-mig-mixed", &[("default", mixed)], "").await;
    let mut mig = rig.resource("nvidia.com/mig-1g.10gb").await;
    let want_count = rig
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
    let (g, m) = mig_of(&rig.node, &id);
    let saw = rig.run("mig", &[resp]).await;
    let mut want = only_gpu(&rig.node, g);
    for cap in rig.node.mig_caps(g, m) {
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
    let g = gpu_of(&rig.node, &gpu.allocated[0]);
    let saw = rig.run(&format!("{label}-slot"), &[resp]).await;
    assert_eq!(saw.gpu_nodes(), only_gpu(&rig.node, g), "{saw:?}");
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
    if !ready() {
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
    if !ready() {
        return;
    }
    let mut rig = Rig::start("rhel-a100", &[("default", ENVVAR)], "").await;
    let mut gpu = rig.resource("nvidia.com/gpu").await;
    let bad = rig.node.profile.gpus[0].uuid.clone();
    let events = rig
        .node
        .root
        .join(rig.node.profile.lib_dir.trim_start_matches('/'))
        .join("gpuhook-sim-state/events");
    std::fs::create_dir_all(events.parent().unwrap()).unwrap();
    // Xid 48 (double-bit ECC) is critical: not in NVIDIA's default-ignored 13, 31, 43, 45, 68, 109.
    std::fs::write(&events, format!("xid {bad} 48\n")).unwrap();
    let marked = gpu
        .wait_list(Duration::from_secs(5), |d| {
            d.get(&bad).map(String::as_str) == Some("Unhealthy")
        })
        .await;
    assert!(
        marked,
        "{bad} not marked Unhealthy within 5 s: {:?}\n{}",
        gpu.devices,
        rig.plugin.log_text()
    );
    assert_eq!(gpu.available(), [rig.node.profile.gpus[1].uuid.clone()]);
    let resp = gpu.allocate(1).await.unwrap();
    let saw = rig.run("healthy", &[resp]).await;
    assert_eq!(saw.gpu_nodes(), only_gpu(&rig.node, 1), "{saw:?}");
    let err = gpu.allocate(1).await.unwrap_err();
    assert!(err.contains("Requested: 1, Available: 0"), "{err}");
}
