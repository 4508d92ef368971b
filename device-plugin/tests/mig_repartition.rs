//! A repartition reaches the kubelet without a plugin restart: the plugin serves a simulated
//! A100 80 GB (MIG off) with `migStrategy: mixed`, `gpuhook-mig-parted` applies seed 003's
//! `all-small` and then `mixed-workload`, and the fake kubelet's registrations and ListAndWatch
//! streams end up advertising exactly the new MIG devices, from the same plugin process.
//!
//! Expectations from NVIDIA's documents, not from our output: under `mixed` a GPU without MIG is
//! `nvidia.com/gpu` and each MIG device is `nvidia.com/mig-<profile>`, its ID the MIG UUID, and
//! `nvidia.com/gpu` covers only GPUs without MIG (shared/reference/kdp-facts.md §2, worked
//! example B); seed 003's layouts are 7× 1g.10gb and 1× 3g.40gb + 2× 2g.20gb, which the A100
//! 80 GB holds (NVIDIA MIG user guide, A100-80GB profile table: 1g.10gb is GPU instance profile
//! ID 19, 2g.20gb ID 14, 3g.40gb ID 9). The MIG UUIDs are what the simulated driver persisted.
//! Needs root (the simulated node has real device nodes), the mock NVML cdylib and
//! `gpuhook-mig-parted` built (`cargo build -p gpuhook-mock-nvml -p gpuhook-mig-manager --bins`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test crate: a panic is a test failure

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::node::{terminate, Plugin, BIN};
use common::{FakeKubelet, Registered};
use gpuhook_device_plugin::api;
use gpuhook_sim::mig_state;
use gpuhook_sim::profile::NodeProfile;
use gpuhook_sim::{materialise, MaterialiseOptions};
use tokio::sync::mpsc::error::TryRecvError;

/// Seed 003's `mig-parted-config` ConfigMap, key `config.yaml`, verbatim.
const SEED_003: &str = r#"version: v1
mig-configs:
  mixed-workload:
    - devices: [0]
      mig-enabled: true
      mig-devices:
        "3g.40gb": 1
        "2g.20gb": 2
  all-small:
    - devices: [0]
      mig-enabled: true
      mig-devices:
        "1g.10gb": 7
"#;

/// NVIDIA's MIG user guide, A100-80GB: GPU instance profile IDs.
const ID_1G10: u32 = 19;
const ID_2G20: u32 = 14;
const ID_3G40: u32 = 9;

/// How long the plugin may take to see a new layout (it polls; the machine may be loaded).
const SETTLE: Duration = Duration::from_secs(60);

/// One A100 80 GB, MIG off, no MIG devices (a100-mig-mixed's GPU 0, fresh).
fn node(root: &Path) -> NodeProfile {
    let mut p = NodeProfile::builtin("a100-mig-mixed").unwrap();
    p.gpus.truncate(1);
    p.gpus[0].mig_mode = false;
    p.gpus[0].mig_devices.clear();
    p.name = "a100-one-fresh".into();
    materialise(&p, root, &MaterialiseOptions::default()).unwrap_or_else(|e| {
        panic!("materialise (needs root and `cargo build -p gpuhook-mock-nvml`): {e}")
    });
    p
}

fn mig_parted(root: &Path, cfg: &Path, name: &str) {
    let bin = Path::new(BIN).parent().unwrap().join("gpuhook-mig-parted");
    assert!(
        bin.is_file(),
        "{} is missing: `cargo build -p gpuhook-mig-manager --bins` first",
        bin.display()
    );
    let out = Command::new(&bin)
        .arg("--driver-root")
        .arg(root)
        .args(["apply", "-f"])
        .arg(cfg)
        .args(["-c", name])
        .env_remove("MIG_PARTED_CONFIG_FILE")
        .env_remove("MIG_PARTED_SELECTED_CONFIG")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "mig-parted apply {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The MIG UUIDs the simulated driver persisted for GPU instances of profile `id`, sorted.
fn persisted(lib: &Path, gpu_uuid: &str, id: u32) -> Vec<String> {
    let st = mig_state::load(lib, gpu_uuid).unwrap().expect("a layout");
    let mut v: Vec<String> = st
        .instances
        .iter()
        .filter(|g| g.profile_id == id)
        .flat_map(|g| g.cis.iter().map(|c| c.uuid.clone()))
        .collect();
    v.sort();
    v
}

/// What the fake kubelet knows: the newest registration per resource and its newest list.
#[derive(Default)]
struct Seen {
    regs: BTreeMap<String, Registered>,
    lists: BTreeMap<String, api::ListAndWatchResponse>,
}

impl Seen {
    /// Takes every registration and list update that arrived; a stream that ended (its server
    /// stopped) drops its resource.
    fn drain(&mut self, kubelet: &mut FakeKubelet) {
        while let Ok(r) = kubelet.registrations.try_recv() {
            let name = r.request.resource_name.clone();
            self.lists.remove(&name);
            self.regs.insert(name, r);
        }
        let mut ended = Vec::new();
        for (name, r) in &mut self.regs {
            loop {
                match r.lists.try_recv() {
                    Ok(l) => {
                        self.lists.insert(name.clone(), l);
                    }
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        ended.push(name.clone());
                        break;
                    }
                }
            }
        }
        for name in ended {
            self.regs.remove(&name);
            self.lists.remove(&name);
        }
    }

    /// Resource -> sorted healthy device IDs, resources with none left out.
    fn advertised(&self) -> BTreeMap<String, Vec<String>> {
        let mut out = BTreeMap::new();
        for (name, l) in &self.lists {
            let mut ids: Vec<String> = l
                .devices
                .iter()
                .filter(|d| d.health == api::HEALTHY)
                .map(|d| d.id.clone())
                .collect();
            ids.sort();
            if !ids.is_empty() {
                out.insert(name.clone(), ids);
            }
        }
        out
    }

    /// Waits until the kubelet is told exactly `want`.
    async fn until(&mut self, kubelet: &mut FakeKubelet, want: &BTreeMap<String, Vec<String>>) {
        let deadline = Instant::now() + SETTLE;
        loop {
            self.drain(kubelet);
            let got = self.advertised();
            if &got == want {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "after {SETTLE:?} the kubelet is told {got:#?}, not {want:#?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn want(entries: &[(&str, Vec<String>)]) -> BTreeMap<String, Vec<String>> {
    entries
        .iter()
        .map(|(n, ids)| (n.to_string(), ids.clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repartition_reaches_the_kubelet_without_a_plugin_restart() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("driver");
    let p = node(&root);
    let lib: PathBuf = root.join(p.lib_dir.trim_start_matches('/'));
    let gpu = p.gpus[0].uuid.clone();
    let cfg = t.path().join("config.yaml");
    std::fs::write(&cfg, SEED_003).unwrap();
    let plugin_cfg = t.path().join("plugin.yaml");
    std::fs::write(&plugin_cfg, "version: v1\nflags:\n  migStrategy: mixed\n").unwrap();

    let dir = t.path().join("plugins");
    std::fs::create_dir(&dir).unwrap();
    let mut kubelet = FakeKubelet::start(&dir);
    let mut plugin = Plugin(
        Command::new(BIN)
            .arg("serve")
            .arg("--config")
            .arg(&plugin_cfg)
            .arg("--driver-root")
            .arg(&root)
            .arg("--plugin-dir")
            .arg(&dir)
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let pid = plugin.0.id();
    let mut seen = Seen::default();
    // MIG off: the whole GPU.
    seen.until(
        &mut kubelet,
        &want(&[("nvidia.com/gpu", vec![gpu.clone()])]),
    )
    .await;

    mig_parted(&root, &cfg, "all-small");
    let small = persisted(&lib, &gpu, ID_1G10);
    assert_eq!(small.len(), 7, "seed 003's all-small");
    seen.until(&mut kubelet, &want(&[("nvidia.com/mig-1g.10gb", small)]))
        .await;

    mig_parted(&root, &cfg, "mixed-workload");
    let three = persisted(&lib, &gpu, ID_3G40);
    let two = persisted(&lib, &gpu, ID_2G20);
    assert_eq!(
        (three.len(), two.len()),
        (1, 2),
        "seed 003's mixed-workload"
    );
    seen.until(
        &mut kubelet,
        &want(&[
            ("nvidia.com/mig-2g.20gb", two),
            ("nvidia.com/mig-3g.40gb", three),
        ]),
    )
    .await;

    assert!(
        plugin.0.try_wait().unwrap().is_none(),
        "the plugin kept running"
    );
    assert_eq!(plugin.0.id(), pid, "the same plugin process");
    assert_eq!(terminate(plugin).await.code(), Some(0));
    kubelet.stop().await;
}
