//! Support for `device_plugin_cri`, `device_plugin_cri_mps` and `nvidia_plugin_cri`: a simulated
//! node (driver root with the mock NVML, gpuhook's CDI spec and config for gpuhook-runtime),
//! `gpuhook-device-plugin serve` as a process, a fake kubelet, the kubelet's allocation steps, the
//! node + CRI rig (`rig.rs`), and the container script that reports what a container saw.

#![allow(dead_code)] // each test crate (device_plugin_cri, _mps, nvidia_plugin_cri) uses a different subset

pub mod cri;
mod cri_running;
pub use gpuhook_device_plugin::fake_kubelet;
pub mod kubelet;
pub mod rig;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use gpuhook_device_plugin::api::{self, ContainerAllocateResponse};
use gpuhook_sim::profile::NodeProfile;

use crate::cdi_support::{build_node, gpuhook_ok, s};
use fake_kubelet::{next_list, Registered, WAIT};

/// A simulated node: driver root, gpuhook's CDI spec for it, gpuhook's config for the wrapper.
pub struct Node {
    pub profile: NodeProfile,
    pub root: PathBuf,
    pub dir: PathBuf,
    pub gpuhook_config: PathBuf,
    pub gpuhook_log: PathBuf,
}

impl Node {
    /// Materialises `profile` under `dir/driver`, writes its CDI spec with `gpuhook cdi
    /// generate` into a private spec dir, and a gpuhook config that points the wrapper at it
    /// (and at `extra_spec_dirs`, e.g. gpu-mps-daemon's).
    pub fn new(dir: &Path, profile: &str, extra_spec_dirs: &[&Path]) -> Node {
        let root = dir.join("driver");
        let p = build_node(profile, &root);
        let spec_dir = dir.join("cdi");
        let cache = dir.join("inventory.json");
        gpuhook_ok(&[
            "cdi",
            "generate",
            "--driver-root",
            s(&root),
            "--output",
            s(&spec_dir.join("nvidia.com-gpu.json")),
            "--inventory-cache",
            s(&cache),
        ]);
        let runc = gpuhook_e2e::which("runc").expect("runc");
        let mut dirs = vec![spec_dir];
        dirs.extend(extra_spec_dirs.iter().map(|d| d.to_path_buf()));
        let gpuhook_log = dir.join("gpuhook.log");
        let gpuhook_config = dir.join("gpuhook.toml");
        std::fs::write(
            &gpuhook_config,
            format!(
                "driver-root = {root:?}\ninventory-cache = {cache:?}\ncdi-spec-dirs = {dirs:?}\n\
                 log-file = {gpuhook_log:?}\nlog-level = \"debug\"\n\n[runtime]\nruntimes = [{runc:?}]\n"
            ),
        )
        .expect("gpuhook config");
        Node {
            profile: p,
            root,
            dir: dir.to_path_buf(),
            gpuhook_config,
            gpuhook_log,
        }
    }

    /// `/dev/nvidia<minor>` of GPU `g`.
    pub fn gpu_node(&self, g: usize) -> String {
        format!("/dev/nvidia{}", self.profile.gpus[g].minor)
    }

    /// The two capability nodes of MIG device `m` of GPU `g`.
    pub fn mig_caps(&self, g: usize, m: usize) -> Vec<String> {
        let mig = &self.profile.gpus[g].mig_devices[m];
        let mut v: Vec<String> = [mig.gi_cap_minor, mig.ci_cap_minor]
            .iter()
            .map(|c| format!("/dev/nvidia-caps/nvidia-cap{c}"))
            .collect();
        v.sort();
        v
    }
}

/// `gpuhook-device-plugin serve` as the DaemonSet runs it; SIGTERM on drop.
pub struct Plugin {
    child: Child,
    pub log: PathBuf,
}

impl Plugin {
    /// Serves `node` with the config `config` (file or dir of named configs) and the node label
    /// read from `label_file`, in the private plugin dir `plugin_dir`.
    pub fn start(node: &Node, config: &Path, label_file: &Path, plugin_dir: &Path) -> Plugin {
        let log = node.dir.join("device-plugin.log");
        let err = std::fs::File::create(&log).expect("plugin log");
        let child = Command::new(gpuhook_e2e::built("gpuhook-device-plugin"))
            .arg("serve")
            .arg("--config")
            .arg(config)
            .arg("--node-label-file")
            .arg(label_file)
            .arg("--driver-root")
            .arg(&node.root)
            .arg("--plugin-dir")
            .arg(plugin_dir)
            .env("RUST_LOG", "info,gpuhook_device_plugin=debug")
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .expect("spawn gpuhook-device-plugin");
        Plugin { child, log }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Plugin {
    fn drop(&mut self) {
        let Ok(pid) = i32::try_from(self.child.id()) else {
            let _ = self.child.kill();
            return;
        };
        // SAFETY: kill(2) of our own child, not reaped yet (reaped below), so the pid is ours.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One registered resource as the device manager tracks it: its healthy devices (from the
/// latest ListAndWatch list) and those already allocated.
pub struct Resource {
    pub reg: Registered,
    pub devices: BTreeMap<String, String>,
    pub allocated: Vec<String>,
}

impl Resource {
    pub async fn new(mut reg: Registered) -> Resource {
        let list = next_list(&mut reg, WAIT).await;
        let mut r = Resource {
            reg,
            devices: BTreeMap::new(),
            allocated: Vec::new(),
        };
        r.set(&list);
        r
    }

    fn set(&mut self, list: &api::ListAndWatchResponse) {
        self.devices = list
            .devices
            .iter()
            .map(|d| (d.id.clone(), d.health.clone()))
            .collect();
    }

    /// Waits (up to `d`) for a ListAndWatch list in which `pred` holds, and keeps it.
    pub async fn wait_list(
        &mut self,
        d: Duration,
        pred: impl Fn(&BTreeMap<String, String>) -> bool,
    ) -> bool {
        let deadline = Instant::now() + d;
        while !pred(&self.devices) {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok(Some(list)) = tokio::time::timeout(left, self.reg.lists.recv()).await else {
                return false;
            };
            self.set(&list);
        }
        true
    }

    /// Healthy, unallocated devices: what the kubelet may hand out (`manager.go:devicesToAllocate`
    /// uses `healthyDevices` minus `allocatedDevices`).
    pub fn available(&self) -> Vec<String> {
        self.devices
            .iter()
            .filter(|(id, h)| *h == "Healthy" && !self.allocated.contains(id))
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// The device manager's allocation of `n` devices for one container: refused by the kubelet
    /// itself when fewer are available (`devicesToAllocate`: "requested number of devices
    /// unavailable for %s. Requested: %d, Available: %d"), else GetPreferredAllocation when the
    /// plugin offers it (`callGetPreferredAllocationIfAvailable`), then Allocate.
    pub async fn allocate(&mut self, n: usize) -> Result<ContainerAllocateResponse, String> {
        let available = self.available();
        let name = self.reg.request.resource_name.clone();
        if available.len() < n {
            return Err(format!(
                "requested number of devices unavailable for {name}. Requested: {n}, Available: {}",
                available.len()
            ));
        }
        let size = i32::try_from(n).expect("small request");
        let mut ids = available[..n].to_vec();
        if self.reg.options.get_preferred_allocation_available {
            let req = api::PreferredAllocationRequest {
                container_requests: vec![api::ContainerPreferredAllocationRequest {
                    available_device_ids: available.clone(),
                    must_include_device_ids: vec![],
                    allocation_size: size,
                }],
            };
            let resp = self.reg.client.get_preferred_allocation(req).await;
            let preferred = resp.map_err(|e| e.message().to_string())?.into_inner();
            let got = preferred.container_responses[0].device_ids.clone();
            // The kubelet keeps preferred IDs that are available, then tops up.
            ids = got.into_iter().filter(|i| available.contains(i)).collect();
            let rest: Vec<String> = available
                .iter()
                .filter(|a| !ids.contains(a))
                .cloned()
                .collect();
            ids.extend(rest);
            ids.truncate(n);
        }
        let resp = self.allocate_ids(&ids).await?;
        self.allocated.extend(ids);
        Ok(resp)
    }

    /// Allocate for exactly these IDs (what a kubelet sends; the plugin validates them).
    pub async fn allocate_ids(
        &mut self,
        ids: &[String],
    ) -> Result<ContainerAllocateResponse, String> {
        let req = api::AllocateRequest {
            container_requests: vec![api::ContainerAllocateRequest {
                devices_ids: ids.to_vec(),
            }],
        };
        let mut resp = self
            .reg
            .client
            .allocate(req)
            .await
            .map_err(|e| e.message().to_string())?
            .into_inner();
        Ok(resp.container_responses.remove(0))
    }
}

/// The container's report: each `/dev/nvidia*` character node (and those under
/// `/dev/nvidia-caps`) with what opening it gives (ENXIO: the device cgroup allows it and no
/// driver is behind it; EPERM: denied), its NVIDIA_/CUDA_ env, then DONE.
pub const REPORT: &str = r#"for d in /dev/nvidia* /dev/nvidia-caps/*; do
  [ -c "$d" ] || continue
  r=$(cat "$d" 2>&1)
  case "$r" in
    *"No such device or address"*) echo "DEV $d ENXIO";;
    *"not permitted"*) echo "DEV $d EPERM";;
    *) echo "DEV $d OTHER $r";;
  esac
done
env | grep -E '^(NVIDIA|CUDA)_' | sort | sed 's/^/ENV /'
echo DONE"#;

/// What a container reported: device node → open result, its env, and any other lines.
#[derive(Debug, Default)]
pub struct Seen {
    pub devices: BTreeMap<String, String>,
    pub env: BTreeMap<String, String>,
    /// The script's other output lines (a test's own checks), in order.
    pub other: Vec<String>,
}

/// Parses a CRI log (`<time> <stream> <tag> <line>`) of a [`REPORT`] run.
pub fn seen(log: &str) -> Seen {
    let mut out = Seen::default();
    let lines: Vec<&str> = log
        .lines()
        .filter_map(|l| l.splitn(4, ' ').nth(3))
        .collect();
    assert!(
        lines.contains(&"DONE"),
        "container did not finish its report:\n{log}"
    );
    for l in lines {
        if let Some(rest) = l.strip_prefix("DEV ") {
            let (dev, res) = rest.split_once(' ').expect("DEV line");
            out.devices.insert(dev.into(), res.into());
        } else if let Some(kv) = l.strip_prefix("ENV ") {
            let (k, v) = kv.split_once('=').expect("ENV line");
            out.env.insert(k.into(), v.into());
        } else if l != "DONE" {
            out.other.push(l.to_string());
        }
    }
    out
}

impl Seen {
    /// The GPU and MIG capability nodes (not the control nodes), each with its open result.
    pub fn gpu_nodes(&self) -> BTreeMap<String, String> {
        self.devices
            .iter()
            .filter(|(d, _)| {
                d.strip_prefix("/dev/nvidia")
                    .is_some_and(|n| n.chars().all(|c| c.is_ascii_digit()))
                    || d.starts_with("/dev/nvidia-caps/")
            })
            .map(|(d, r)| (d.clone(), r.clone()))
            .collect()
    }
}
