//! Test support shared by the unit tests and the crate's integration tests: a node inventory
//! (one full H100, one H100 in MIG mode with two 1g.10gb devices) and an in-memory [`Cluster`].
//! No I/O; nothing here is used by the plugin itself.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use gpuhook_node::{
    DeviceMajors, DiscoverySource, DriverFiles, Gpu, Inventory, MigDevice, INVENTORY_FORMAT_VERSION,
};
use serde_json::{json, Value};

use crate::kube::{Cluster, KubeError};
use crate::mps::MpsOptions;

/// UUID of test GPU `i`.
pub fn gpu_uuid(i: u32) -> String {
    format!("GPU-{i:08x}-aaaa-bbbb-cccc-000000000000")
}

/// UUID of MIG device `m` of GPU 1.
pub fn mig_uuid(m: u32) -> String {
    format!("MIG-{m:08x}-aaaa-bbbb-cccc-000000000001")
}

/// Two H100s (80 GiB): GPU 0 whole, GPU 1 in MIG mode with two 1g.10gb devices.
pub fn inventory() -> Inventory {
    let gpu = |i: u32, mig: bool| Gpu {
        index: i,
        minor: i,
        uuid: gpu_uuid(i),
        pci_bus_id: format!("00000000:{:02x}:00.0", 0x18 + i),
        name: "NVIDIA H100 80GB HBM3".into(),
        memory_mib: 81559,
        architecture: Some("hopper".into()),
        compute_capability: Some((9, 0)),
        brand: Some("nvidia".into()),
        mig_enabled: mig,
        mig_devices: if mig {
            (0..2)
                .map(|m| MigDevice {
                    index: m,
                    parent_index: i,
                    gi_id: 9 + m,
                    ci_id: 0,
                    uuid: mig_uuid(m),
                    memory_mib: 9856,
                    profile: Some("1g.10gb".into()),
                    gi_cap_minor: 84 + 9 * m,
                    ci_cap_minor: 85 + 9 * m,
                })
                .collect()
        } else {
            Vec::new()
        },
    };
    Inventory {
        format_version: INVENTORY_FORMAT_VERSION,
        driver_root: "/".into(),
        dev_root: "/".into(),
        driver_version: "570.158.01".into(),
        cuda_driver_version: Some("12.8".into()),
        majors: DeviceMajors {
            nvidia: 195,
            nvidia_uvm: Some(510),
            nvidia_caps: Some(511),
            nvidia_caps_imex_channels: None,
        },
        gpus: vec![gpu(0, false), gpu(1, true)],
        mig_caps: None,
        files: DriverFiles::default(),
        source: DiscoverySource::Nvml,
    }
}

/// An allocated claim: `results` are (request, device) of driver gpu.nvidia.com in pool
/// `pool`; `configs` the allocation's opaque configs (`FromClaim`).
pub fn claim(
    ns: &str,
    name: &str,
    uid: &str,
    pool: &str,
    results: &[(&str, &str)],
    configs: Vec<Value>,
) -> Value {
    let results: Vec<Value> = results
        .iter()
        .map(|(r, d)| json!({"request": r, "driver": "gpu.nvidia.com", "pool": pool, "device": d}))
        .collect();
    json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": ns, "uid": uid},
        "spec": {"devices": {"requests": []}},
        "status": {"allocation": {"devices": {"results": results, "config": configs}}},
    })
}

/// An opaque config of the claim for `requests`.
pub fn opaque(requests: &[&str], parameters: Value) -> Value {
    json!({"source": "FromClaim", "requests": requests,
           "opaque": {"driver": "gpu.nvidia.com", "parameters": parameters}})
}

/// Claims and slices in memory.
#[derive(Debug, Default)]
pub struct MemCluster {
    pub claims: Mutex<BTreeMap<(String, String), Value>>,
    pub slices: Mutex<BTreeMap<String, Value>>,
    pub pods: Mutex<BTreeMap<(String, String), Value>>,
}

impl MemCluster {
    pub fn add_claim(&self, claim: Value) {
        let ns = claim["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let name = claim["metadata"]["name"].as_str().unwrap_or("").to_string();
        self.claims
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((ns, name), claim);
    }
}

fn not_found(path: String) -> KubeError {
    KubeError::Status {
        method: "GET".into(),
        path,
        code: 404,
        reason: "NotFound".into(),
        message: "not found".into(),
    }
}

impl Cluster for MemCluster {
    fn get_claim(&self, namespace: &str, name: &str) -> Result<Value, KubeError> {
        let claims = self.claims.lock().unwrap_or_else(|p| p.into_inner());
        claims
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
            .ok_or_else(|| not_found(format!("{namespace}/{name}")))
    }
    fn get_pod(&self, namespace: &str, name: &str) -> Result<Value, KubeError> {
        let pods = self.pods.lock().unwrap_or_else(|p| p.into_inner());
        pods.get(&(namespace.to_string(), name.to_string()))
            .cloned()
            .ok_or_else(|| not_found(format!("pods/{namespace}/{name}")))
    }
    fn list_slices(&self, node: &str, driver: &str) -> Result<Vec<Value>, KubeError> {
        let slices = self.slices.lock().unwrap_or_else(|p| p.into_inner());
        Ok(slices
            .values()
            .filter(|s| s["spec"]["nodeName"] == node && s["spec"]["driver"] == driver)
            .cloned()
            .collect())
    }
    fn create_slice(&self, slice: &Value) -> Result<(), KubeError> {
        let name = slice["metadata"]["name"].as_str().unwrap_or("").to_string();
        let mut slices = self.slices.lock().unwrap_or_else(|p| p.into_inner());
        slices.insert(name, slice.clone());
        Ok(())
    }
    fn replace_slice(&self, name: &str, slice: &Value) -> Result<(), KubeError> {
        let mut slices = self.slices.lock().unwrap_or_else(|p| p.into_inner());
        match slices.get_mut(name) {
            Some(s) => {
                *s = slice.clone();
                Ok(())
            }
            None => Err(not_found(name.to_string())),
        }
    }
    fn delete_slice(&self, name: &str) -> Result<(), KubeError> {
        let mut slices = self.slices.lock().unwrap_or_else(|p| p.into_inner());
        slices.remove(name);
        Ok(())
    }
}

/// Claim daemons under `root` run by `control_binary`, 2 s timeouts, no private `/dev/shm`, no
/// NVML (no compute-mode change): override fields with `..mps_options(…)`.
pub fn mps_options(root: PathBuf, control_binary: PathBuf) -> MpsOptions {
    MpsOptions {
        root,
        driver_root: "/".into(),
        control_binary,
        start_timeout: Duration::from_secs(2),
        command_timeout: Duration::from_secs(2),
        shm: false,
        compute: crate::mps_node::no_compute_mode("no NVML in this test"),
    }
}
