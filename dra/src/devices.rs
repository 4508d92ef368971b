//! The node's devices as this driver names and describes them (dra-facts §5, NVIDIA's
//! `deviceinfo.go`/`mig.go`): `gpu-<minor>` for a full GPU, `gpu-<parent minor>-mig-<profile>-
//! <gi>-<ci>` for a MIG device, with NVIDIA's attribute names and the `memory` capacity.
//!
//! Difference: NVIDIA names a static MIG device by GI *profile id* and *placement start*, which
//! the inventory does not hold; we use the GPU- and compute-instance ids (unique per GPU too).
//! Names are opaque to claims (DeviceClasses select by attributes), so claims are unaffected.

use std::collections::BTreeMap;
use std::path::Path;

use gpuhook_node::{DeviceRef, Inventory};
use serde_json::{json, Value};

/// Kubernetes' standard PCI attributes (`deviceattribute/attribute.go`).
pub const PCI_BUS_ID: &str = "resource.kubernetes.io/pciBusID";
pub const PCIE_ROOT: &str = "resource.kubernetes.io/pcieRoot";

/// One device this driver publishes and prepares.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeDevice {
    pub name: String,
    pub dev: DeviceRef,
    pub uuid: String,
    /// The physical GPU (itself for a full GPU).
    pub gpu_uuid: String,
    pub memory_bytes: u64,
    /// Attribute name → `{"string": …}` / `{"int": …}` / `{"version": …}`.
    pub attributes: BTreeMap<String, Value>,
    /// A partitionable device's counters and MIG placement (`--sharing …,partitionable-mig`).
    pub slot: Option<crate::slot::Slot>,
}

impl NodeDevice {
    /// Published in the slices: every device but the full GPU of an Ampere GPU in MIG mode under
    /// partitionable MIG (kept for its counter set, `Slot::offered`).
    pub fn offered(&self) -> bool {
        self.slot.as_ref().is_none_or(|s| s.offered)
    }

    pub fn is_mig(&self) -> bool {
        matches!(self.dev, DeviceRef::Mig { .. })
            || self.slot.as_ref().is_some_and(|s| s.mig.is_some())
    }
}

/// An RFC 1123 label fragment: lower case, `[a-z0-9-]` only (`1g.10gb+me` → `1g10gbme`).
pub fn sanitize(s: &str) -> String {
    s.to_ascii_lowercase()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .collect()
}

/// A semantic version from a dotted driver/CUDA version: leading zeros dropped, three parts
/// (`570.158.01` → `570.158.1`, `12.8` → `12.8.0`), as Masterminds/semver normalises them.
pub fn semver(v: &str) -> Option<String> {
    let mut parts: Vec<u64> = v
        .split('.')
        .map(|p| p.trim().parse::<u64>().ok())
        .collect::<Option<_>>()?;
    if parts.is_empty() || parts.len() > 3 {
        return None;
    }
    parts.resize(3, 0);
    Some(format!("{}.{}.{}", parts[0], parts[1], parts[2]))
}

/// `00000000:07:00.0` (NVML) → `0000:07:00.0` (sysfs, the standard attribute's form).
pub fn pci_address(nvml: &str) -> String {
    let lower = nvml.to_ascii_lowercase();
    match lower.split_once(':') {
        Some((dom, rest)) if dom.len() > 4 => format!("{}:{rest}", &dom[dom.len() - 4..]),
        _ => lower,
    }
}

/// The PCIe root complex of a device (`pci0000:00`), from its sysfs link under `sys_root`
/// (`/sys/bus/pci/devices/<addr>` → `…/devices/pci0000:00/…/<addr>`).
pub fn pcie_root(sys_root: &Path, addr: &str) -> Option<String> {
    let link = gpuhook_node::join_under(sys_root, Path::new("/sys/bus/pci/devices")).join(addr);
    let target = std::fs::read_link(link).ok()?;
    target
        .components()
        .filter_map(|c| c.as_os_str().to_str())
        .find(|c| c.starts_with("pci") && c.contains(':'))
        .map(String::from)
}

fn capitalized(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
        .unwrap_or_default()
}

fn s(v: impl Into<String>) -> Value {
    json!({ "string": v.into() })
}

/// Attributes every device of one GPU shares (product, versions, PCI).
fn gpu_common(inv: &Inventory, g: &gpuhook_node::Gpu, sys_root: &Path) -> BTreeMap<String, Value> {
    let mut a = BTreeMap::new();
    a.insert("productName".into(), s(g.name.clone()));
    if let Some(b) = &g.brand {
        a.insert("brand".into(), s(capitalized(b)));
    }
    if let Some(arch) = &g.architecture {
        a.insert("architecture".into(), s(capitalized(arch)));
    }
    if let Some((maj, min)) = g.compute_capability {
        a.insert(
            "cudaComputeCapability".into(),
            json!({ "version": format!("{maj}.{min}.0") }),
        );
    }
    if let Some(v) = semver(&inv.driver_version) {
        a.insert("driverVersion".into(), json!({ "version": v }));
    }
    if let Some(v) = inv.cuda_driver_version.as_deref().and_then(semver) {
        a.insert("cudaDriverVersion".into(), json!({ "version": v }));
    }
    let addr = pci_address(&g.pci_bus_id);
    if let Some(root) = pcie_root(sys_root, &addr) {
        a.insert(PCIE_ROOT.into(), s(root));
    }
    a.insert(PCI_BUS_ID.into(), s(addr));
    a
}

/// Every full GPU and MIG device of `inv`, GPUs in index order, each followed by its MIG
/// devices. A MIG-enabled GPU is published only through its MIG devices (as NVIDIA does).
pub fn catalogue(inv: &Inventory, sys_root: &Path) -> Vec<NodeDevice> {
    let mut out = Vec::new();
    for g in &inv.gpus {
        let common = gpu_common(inv, g, sys_root);
        if !g.mig_enabled {
            let mut a = common.clone();
            a.insert("type".into(), s("gpu"));
            a.insert("uuid".into(), s(g.uuid.clone()));
            a.insert("index".into(), json!({ "int": g.index }));
            a.insert("minor".into(), json!({ "int": g.minor }));
            out.push(NodeDevice {
                name: format!("gpu-{}", g.minor),
                dev: DeviceRef::Gpu { index: g.index },
                uuid: g.uuid.clone(),
                gpu_uuid: g.uuid.clone(),
                memory_bytes: g.memory_mib << 20,
                attributes: a,
                slot: None,
            });
        }
        for m in &g.mig_devices {
            let profile = m.profile.clone().unwrap_or_default();
            let mut a = common.clone();
            a.insert("type".into(), s("mig"));
            a.insert("uuid".into(), s(m.uuid.clone()));
            a.insert("parentUUID".into(), s(g.uuid.clone()));
            a.insert("parentIndex".into(), json!({ "int": g.index }));
            a.insert("parentMinor".into(), json!({ "int": g.minor }));
            if !profile.is_empty() {
                a.insert("profile".into(), s(profile.clone()));
            }
            out.push(NodeDevice {
                name: format!(
                    "gpu-{}-mig-{}-{}-{}",
                    g.minor,
                    sanitize(&profile),
                    m.gi_id,
                    m.ci_id
                ),
                dev: DeviceRef::Mig {
                    parent_index: g.index,
                    index: m.index,
                },
                uuid: m.uuid.clone(),
                gpu_uuid: g.uuid.clone(),
                memory_bytes: m.memory_mib << 20,
                attributes: a,
                slot: None,
            });
        }
    }
    out
}

#[cfg(test)]
#[path = "devices_tests.rs"]
mod tests;
