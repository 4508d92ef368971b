//! The device plugin's CDI strategies end to end with a real CDI consumer: the names in Allocate's
//! `CDIDevices` (`deviceListStrategy: cdi-cri`) and in the `cdi.k8s.io/*` annotation
//! (`cdi-annotations`) must resolve, through the CDI library, to exactly the allocated GPU.
//!
//! Why podman: containerd ≥ 1.7 (with `enable_cdi`) and CRI-O resolve `CDIDevices` with the CDI
//! library. containerd 1.7's CRI (`pkg/cri/sbserver/container_create_linux.go:containerSpecOpts`,
//! and `pkg/cri/server/` alike) appends `customopts.WithCDI(config.Annotations,
//! config.CDIDevices)` when `EnableCDI`; `pkg/cri/opts/spec_linux.go:WithCDI` takes each
//! `CDIDevice.Name`, adds the names from `cdi.ParseAnnotations(annotations)`, then
//! `cdi.Refresh()` and `cdi.InjectDevices(s, devices...)` on the OCI spec, over the spec dirs
//! (`cdi_spec_dirs`, default `/etc/cdi` and `/var/run/cdi`). Only containerd 1.6 is installable
//! here, and its CRI ignores `CDIDevices`. podman 4.3 resolves `--device <qualified name>` with the
//! same library (v0.5.2: registry `InjectDevices` over `/etc/cdi` and `/var/run/cdi`), so
//! `podman run --device <name>` stands in for containerd 1.7's CRI here.
//!
//! The kubelet passes the names untouched: `pkg/kubelet/kuberuntime/kuberuntime_container.go:
//! makeCDIDevices` copies only `Name` of each of the run options' CDI devices, which
//! `device_plugin_cri_support::kubelet::run_options` collects from the Allocate responses
//! (`pod_devices.go:deviceRunContainerOptions`). The test takes the names from there.
//!
//! Each test: a simulated node, `gpuhook cdi generate` writing its spec (kind `nvidia.com/gpu`)
//! to `/var/run/cdi` (removed on drop), `gpuhook-device-plugin serve` registered with a fake
//! kubelet, Allocate, then `podman run --device <name>` per name; the container must see exactly
//! that GPU's `/dev/nvidia<minor>` (and for a MIG device its GI/CI capability nodes), each opening
//! with ENXIO (allowed by the device cgroup, no driver behind it), and no other GPU or MIG node.
//!
//! Run under `flock /tmp/gpuhook-e2e.lock` (writes /var/run/cdi, runs podman). Needs root, podman
//! and runc; with GPUHOOK_REQUIRE_E2E=1 a missing one fails the test instead of skipping it.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test crate: a panic is a test failure

mod cdi_support;
mod device_plugin_cri_support;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use cdi_support::{busybox_rootfs, gpuhook_ok, podman_run, s, RemoveOnDrop};
use device_plugin_cri_support::fake_kubelet::FakeKubelet;
use device_plugin_cri_support::kubelet::run_options;
use device_plugin_cri_support::{seen, Node, Plugin, Resource, Seen, REPORT};
use gpuhook_device_plugin::api::ContainerAllocateResponse;

/// The spec file this test writes; the CDI library reads every `*.json` in `/var/run/cdi`.
const SPEC: &str = "/var/run/cdi/gpuhook-e2e-device-plugin-cdi-names.json";
const CDI_DIRS: [&str; 2] = ["/etc/cdi", "/var/run/cdi"];
/// The tests of this file share [`SPEC`]: one at a time (the e2e lock orders test binaries).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn config(mig: &str, list: &str, id: &str, sharing: &str) -> String {
    format!(
        "version: v1\nflags:\n  migStrategy: {mig}\n  plugin:\n    deviceListStrategy: {list}\n    \
         deviceIDStrategy: {id}\n{sharing}"
    )
}

/// A node with its spec in `/var/run/cdi` and the plugin serving it to a fake kubelet.
struct Setup {
    // Dropped in this order: the plugin (SIGTERM), the kubelet, the spec, the node's files.
    plugin: Plugin,
    kubelet: FakeKubelet,
    _spec: RemoveOnDrop,
    node: Node,
    rootfs: PathBuf,
    _tmp: tempfile::TempDir,
    _serial: tokio::sync::MutexGuard<'static, ()>,
}

/// No other spec may declare kind `nvidia.com/gpu`: the CDI library would refuse the conflict.
fn no_other_nvidia_spec() {
    for dir in CDI_DIRS {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for e in entries.flatten() {
            let text = std::fs::read_to_string(e.path()).unwrap_or_default();
            assert!(
                !text.contains("\"nvidia.com/gpu\"") && !text.contains("kind: nvidia.com/gpu"),
                "{} already declares kind nvidia.com/gpu (left over from another run?): remove \
                 it, this test writes its own",
                e.path().display()
            );
        }
    }
}

impl Setup {
    async fn start(profile: &str, config: &str) -> Setup {
        let serial = SERIAL.lock().await;
        no_other_nvidia_spec();
        let tmp = tempfile::Builder::new()
            .prefix(&format!("gpuhook-dpcdi-{profile}-"))
            .tempdir()
            .expect("temp dir");
        let dir = tmp.path();
        let node = Node::new(dir, profile, &[]);
        std::fs::create_dir_all("/var/run/cdi").expect("/var/run/cdi");
        let spec = RemoveOnDrop(PathBuf::from(SPEC));
        let args = ["cdi", "generate", "--driver-root", s(&node.root)];
        gpuhook_ok(&[&args[..], &["--output", SPEC, "--no-inventory-cache"]].concat());
        let plugin_dir = dir.join("device-plugins");
        std::fs::create_dir_all(&plugin_dir).expect("plugin dir");
        let kubelet = FakeKubelet::start(&plugin_dir);
        let cfg = dir.join("config.yaml");
        std::fs::write(&cfg, config).expect("config");
        let label = dir.join("node-label");
        std::fs::write(&label, "").expect("label file");
        let plugin = Plugin::start(&node, &cfg, &label, &plugin_dir);
        let rootfs = busybox_rootfs(dir);
        Setup {
            plugin,
            kubelet,
            _spec: spec,
            node,
            rootfs,
            _tmp: tmp,
            _serial: serial,
        }
    }

    /// The registration of resource `name` (the plugin registers each of its resources).
    async fn resource(&mut self, name: &str) -> Resource {
        let wait = Duration::from_secs(20);
        while let Ok(Some(reg)) =
            tokio::time::timeout(wait, self.kubelet.registrations.recv()).await
        {
            if reg.request.resource_name == name {
                return Resource::new(reg).await;
            }
        }
        panic!("{name} not registered:\n{}", self.plugin.log_text());
    }

    /// `podman run --device <name>` of the report script; what the container saw.
    fn run(&self, name: &str) -> Seen {
        let out = podman_run(name, &self.rootfs, REPORT);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "podman run --device {name}: {}\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        // `seen` parses CRI log lines (`<time> <stream> <tag> <line>`): give each line that form.
        let log: Vec<String> = stdout.lines().map(|l| format!("- stdout F {l}")).collect();
        seen(&log.join("\n"))
    }

    /// GPU index (into the profile) of a device ID: `<uuid>` or `<uuid>::<n>`.
    fn gpu_of(&self, id: &str) -> usize {
        let uuid = id.split("::").next().unwrap_or(id);
        let gpus = &self.node.profile.gpus;
        gpus.iter()
            .position(|g| g.uuid == uuid)
            .unwrap_or_else(|| panic!("{id} is no GPU of the node"))
    }

    /// (GPU, MIG index) of a MIG device ID.
    fn mig_of(&self, id: &str) -> (usize, usize) {
        let gpus = &self.node.profile.gpus;
        gpus.iter()
            .enumerate()
            .find_map(|(g, gpu)| {
                let m = gpu.mig_devices.iter().position(|d| d.uuid == id)?;
                Some((g, m))
            })
            .unwrap_or_else(|| panic!("{id} is no MIG device of the node"))
    }

    /// Exactly GPU `g`'s node (and `caps`), each allowed.
    fn only(&self, g: usize, caps: Vec<String>) -> BTreeMap<String, String> {
        std::iter::once(self.node.gpu_node(g))
            .chain(caps)
            .map(|d| (d, "ENXIO".to_string()))
            .collect()
    }
}

/// The CDI names the kubelet sends for this one response (`makeCDIDevices`: names only). With
/// only CDI strategies NVIDIA sets no `NVIDIA_VISIBLE_DEVICES` (kdp-facts §5 step 6).
fn cri_names(resp: &ContainerAllocateResponse) -> Vec<String> {
    assert!(
        resp.envs.is_empty(),
        "cdi-cri sets no envs: {:?}",
        resp.envs
    );
    assert!(resp.annotations.is_empty(), "{:?}", resp.annotations);
    run_options(std::slice::from_ref(resp)).cdi_devices
}

fn ready() -> bool {
    gpuhook_e2e::e2e_ready("device_plugin_cdi_names", &["podman", "runc", "busybox"])
}

/// `nvidia.com/gpu: 1` under cdi-cri with deviceIDStrategy uuid, then index: the name is
/// `nvidia.com/gpu=<uuid>` / `=<index>` (the ID strategy picks the CDI device name, kdp-facts §5)
/// and podman gives the container exactly that GPU.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cdi_cri_full_gpu_uuid_and_index_resolve_with_podman() {
    if !ready() {
        return;
    }
    for id_strategy in ["uuid", "index"] {
        let mut set = Setup::start("rhel-a100", &config("none", "cdi-cri", id_strategy, "")).await;
        let mut gpu = set.resource("nvidia.com/gpu").await;
        assert_eq!(gpu.devices.len(), 2, "{:?}", gpu.devices);
        // Not the profile's first GPU, so a name that fell back to GPU 0 would be caught.
        let ids = gpu.available();
        let id = ids
            .iter()
            .find(|i| set.gpu_of(i) != 0)
            .expect("a second GPU");
        let id = id.clone();
        let resp = gpu.allocate_ids(std::slice::from_ref(&id)).await.unwrap();
        let g = set.gpu_of(&id);
        let p = &set.node.profile.gpus[g];
        let want = match id_strategy {
            "uuid" => p.uuid.clone(),
            _ => p.index.to_string(),
        };
        let names = cri_names(&resp);
        assert_eq!(names, [format!("nvidia.com/gpu={want}")], "{id_strategy}");
        let saw = set.run(&names[0]);
        assert_eq!(
            saw.gpu_nodes(),
            set.only(g, vec![]),
            "{id_strategy}: {saw:?}"
        );
    }
}

/// A mixed-strategy MIG device (`nvidia.com/mig-1g.10gb: 1`): the name is the MIG device's UUID
/// and the container gets the parent GPU's node plus the device's GI and CI capability nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cdi_cri_mixed_mig_device_resolves_with_podman() {
    if !ready() {
        return;
    }
    let mut set = Setup::start("a100-mig-mixed", &config("mixed", "cdi-cri", "uuid", "")).await;
    let mut mig = set.resource("nvidia.com/mig-1g.10gb").await;
    let resp = mig.allocate(1).await.unwrap();
    let id = mig.allocated[0].clone();
    let (g, m) = set.mig_of(&id);
    let names = cri_names(&resp);
    assert_eq!(names, [format!("nvidia.com/gpu={id}")]);
    let saw = set.run(&names[0]);
    let want = set.only(g, set.node.mig_caps(g, m));
    assert_eq!(saw.gpu_nodes(), want, "{saw:?}");
}

/// A time-sliced replica (`<uuid>::<n>`, 2 replicas per GPU): the name is the GPU's UUID without
/// the replica suffix (NVIDIA strips `::n`, kdp-facts §5) and resolves to that one GPU.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cdi_cri_time_sliced_replica_resolves_with_podman() {
    if !ready() {
        return;
    }
    let ts =
        "sharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n";
    let mut set = Setup::start("rhel-a100", &config("none", "cdi-cri", "uuid", ts)).await;
    let mut gpu = set.resource("nvidia.com/gpu").await;
    assert_eq!(gpu.devices.len(), 4, "{:?}", gpu.devices);
    let id = gpu.available()[3].clone();
    assert!(id.contains("::"), "{id}");
    let resp = gpu.allocate_ids(std::slice::from_ref(&id)).await.unwrap();
    let g = set.gpu_of(&id);
    let names = cri_names(&resp);
    let uuid = &set.node.profile.gpus[g].uuid;
    assert_eq!(names, [format!("nvidia.com/gpu={uuid}")]);
    let saw = set.run(&names[0]);
    assert_eq!(saw.gpu_nodes(), set.only(g, vec![]), "{saw:?}");
}

/// cdi-annotations with both GPUs: one `cdi.k8s.io/nvidia-device-plugin_<id>` annotation whose
/// comma-joined value names the same devices cdi-cri would (kdp-facts §5); each name resolves
/// with podman to its own GPU.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cdi_annotations_names_resolve_with_podman() {
    if !ready() {
        return;
    }
    let mut set = Setup::start("rhel-a100", &config("none", "cdi-annotations", "uuid", "")).await;
    let mut gpu = set.resource("nvidia.com/gpu").await;
    let ids = gpu.available();
    let resp = gpu.allocate_ids(&ids).await.unwrap();
    assert!(
        resp.cdi_devices.is_empty() && resp.envs.is_empty(),
        "{resp:?}"
    );
    let opts = run_options(std::slice::from_ref(&resp));
    let [(key, value)] = &opts.annotations[..] else {
        panic!("one annotation wanted: {:?}", opts.annotations);
    };
    assert!(key.starts_with("cdi.k8s.io/nvidia-device-plugin_"), "{key}");
    let names: Vec<&str> = value.split(',').collect();
    let want: Vec<String> = ids.iter().map(|i| format!("nvidia.com/gpu={i}")).collect();
    assert_eq!(names, want);
    for (name, id) in names.iter().zip(&ids) {
        let g = set.gpu_of(id);
        let saw = set.run(name);
        assert_eq!(saw.gpu_nodes(), set.only(g, vec![]), "{name}: {saw:?}");
    }
}
