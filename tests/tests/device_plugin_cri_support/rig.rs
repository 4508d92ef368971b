//! A simulated node with containerd's CRI plugin (a [`Bench`]), and with gpuhook's device plugin
//! and the fake kubelet on top (a [`Rig`]). A `Bench` alone serves tests that play another
//! device plugin's part (NVIDIA's) by building its Allocate response by hand.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use gpuhook_device_plugin::api::ContainerAllocateResponse;

use super::cri::Cri;
use super::fake_kubelet::FakeKubelet;
use super::kubelet::{container_config, run_options};
use super::{seen, Node, Plugin, Resource, Seen, REPORT};

const TOOLS: &[&str] = &["containerd", "ctr", "runc", "busybox", "tar", "sha256sum"];

/// Whether the end-to-end tools are here (skip, or fail under GPUHOOK_REQUIRE_E2E=1).
pub fn ready(test: &str) -> bool {
    gpuhook_e2e::e2e_ready(test, TOOLS)
}

/// A temp dir for one test's node.
pub fn tmp(tag: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("gpuhook-dpcri-{tag}-"))
        .tempdir()
        .expect("temp dir")
}

/// A simulated node and containerd's CRI plugin with the `gpuhook` runtime handler.
pub struct Bench {
    // Dropped in this order: containerd (pods, shims, mounts), then the node's files.
    pub cri: Cri,
    pub node: Node,
}

impl Bench {
    /// Node `profile` under `dir`; gpuhook-runtime also reads CDI specs from `extra_spec_dirs`.
    pub async fn start(dir: &Path, profile: &str, extra_spec_dirs: &[&Path]) -> Bench {
        Bench::start_with(dir, profile, extra_spec_dirs, &[]).await
    }

    /// [`Bench::start`] with the gpuhook handler's `pod_annotations` (see [`Cri::start_with`]).
    pub async fn start_with(
        dir: &Path,
        profile: &str,
        extra_spec_dirs: &[&Path],
        pod_annotations: &[&str],
    ) -> Bench {
        let node = Node::new(dir, profile, extra_spec_dirs);
        let cri = Cri::start_with(dir, &node.gpuhook_config, pod_annotations).await;
        Bench { cri, node }
    }

    /// Runs a pod whose one container got `responses` and reports what it saw.
    pub async fn run(&mut self, pod: &str, responses: &[ContainerAllocateResponse]) -> Seen {
        self.run_script(pod, REPORT, responses).await
    }

    /// [`Bench::run`] with the container running `script` (which must end with [`REPORT`]).
    pub async fn run_script(
        &mut self,
        pod: &str,
        script: &str,
        responses: &[ContainerAllocateResponse],
    ) -> Seen {
        let config = container_config("gpu", script, run_options(responses));
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

    /// The GPU index of a full-GPU device ID (`<uuid>` or `<uuid>::<n>`).
    pub fn gpu_of(&self, id: &str) -> usize {
        let uuid = id.split("::").next().unwrap_or(id);
        self.node
            .profile
            .gpus
            .iter()
            .position(|g| g.uuid == uuid)
            .unwrap_or_else(|| panic!("{id} is no GPU of the node"))
    }

    /// Exactly these GPUs' nodes, allowed.
    pub fn only_gpus(&self, gpus: &[usize]) -> BTreeMap<String, String> {
        gpus.iter()
            .map(|&g| (self.node.gpu_node(g), "ENXIO".to_string()))
            .collect()
    }
}

/// The named configs of one ConfigMap (seed scenario: `time-slicing-config` with one key per
/// node type, plus `default`), written as a ConfigMap volume is: one file per key.
fn config_dir(dir: &Path, configs: &[(&str, &str)]) -> PathBuf {
    let d = dir.join("config");
    std::fs::create_dir_all(&d).expect("config dir");
    for (name, text) in configs {
        std::fs::write(d.join(name), text).expect("config file");
    }
    d
}

/// A [`Bench`] with gpuhook's device plugin serving it and the fake kubelet.
pub struct Rig {
    // Dropped in this order: the plugin (SIGTERM), the bench, the dirs.
    pub plugin: Plugin,
    pub kubelet: FakeKubelet,
    pub bench: Bench,
    pub label: PathBuf,
    pub tmp: tempfile::TempDir,
}

impl Rig {
    /// Node `profile`, configs `configs` (a ConfigMap dir), node label value `label`.
    pub async fn start(profile: &str, configs: &[(&str, &str)], label: &str) -> Rig {
        Self::start_in(tmp(profile), profile, configs, label, &[]).await
    }

    /// [`Rig::start`] in `tmp`, gpuhook-runtime also reading CDI specs from `extra_spec_dirs`.
    pub async fn start_in(
        tmp: tempfile::TempDir,
        profile: &str,
        configs: &[(&str, &str)],
        label: &str,
        extra_spec_dirs: &[&Path],
    ) -> Rig {
        let dir = tmp.path();
        let bench = Bench::start(dir, profile, extra_spec_dirs).await;
        let plugin_dir = dir.join("device-plugins");
        std::fs::create_dir_all(&plugin_dir).expect("plugin dir");
        let kubelet = FakeKubelet::start(&plugin_dir);
        let cfg = config_dir(dir, configs);
        let label_file = dir.join("node-label");
        std::fs::write(&label_file, label).expect("label file");
        let plugin = Plugin::start(&bench.node, &cfg, &label_file, &plugin_dir);
        Rig {
            plugin,
            kubelet,
            bench,
            label: label_file,
            tmp,
        }
    }

    /// The next registered resource named `name` (others are skipped), with its first list.
    pub async fn resource(&mut self, name: &str) -> Resource {
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
    pub async fn run(&mut self, pod: &str, responses: &[ContainerAllocateResponse]) -> Seen {
        self.bench.run(pod, responses).await
    }
}
