//! Device nodes of a selection of devices, and the control nodes.
//!
//! A node is declared with its type and numbers (so a runtime need not stat the host) and, when
//! discovery saw it, the host node's mode and non-root owner: a runtime creates a node without
//! `fileMode` as 0666, which would turn a MIG capability node that is 0444 on the host into a
//! writable one. NVIDIA's generator does the same from `lstat` of the host node
//! (nvidia-container-toolkit v1.20.0 internal/edits/device.go `fromPathOrDefault`). The optional
//! control nodes (`nvidia-modeset`, `nvidia-uvm`, `nvidia-uvm-tools`) are declared only when
//! the node has them (NVIDIA locates each, pkg/nvcdi/common-nvml.go `newCommonNVMLDiscoverer`).

use std::collections::BTreeSet;
use std::path::Path;

use gpuhook_node::devnodes::{
    cap_node_path, gpu_node_path, NVIDIACTL, NVIDIA_MODESET, NVIDIA_UVM, NVIDIA_UVM_TOOLS,
};
use gpuhook_node::{Capability, DeviceRef, Inventory, NodeState};

use crate::spec::DeviceNode;
use crate::CdiError;

/// A path of the inventory as a spec string (specs are JSON/YAML: UTF-8 only).
pub(crate) fn path_str(p: &Path) -> Result<String, CdiError> {
    p.to_str()
        .map(str::to_owned)
        .ok_or_else(|| CdiError::InvalidOption {
            option: "inventory",
            message: format!("path {} is not UTF-8", p.display()),
        })
}

/// Cgroup permissions of every node we declare (no mknod).
pub const NODE_PERMISSIONS: &str = "rw";

fn node(inv: &Inventory, path: String, major: u32, minor: u32) -> Result<DeviceNode, CdiError> {
    let host_path = if inv.dev_root == Path::new("/") {
        None
    } else {
        Some(path_str(&inv.host_dev_path(Path::new(&path)))?)
    };
    let (file_mode, uid, gid) = match inv.node_state(&path) {
        NodeState::Present(n) => (
            Some(n.mode),
            Some(n.uid).filter(|&u| u != 0),
            Some(n.gid).filter(|&g| g != 0),
        ),
        NodeState::Absent | NodeState::Unknown => (None, None, None),
    };
    Ok(DeviceNode {
        path,
        host_path,
        device_type: Some("c".into()),
        major: Some(major.into()),
        minor: Some(minor.into()),
        file_mode,
        permissions: Some(NODE_PERMISSIONS.into()),
        uid,
        gid,
    })
}

fn device_label(d: &DeviceRef) -> String {
    match d {
        DeviceRef::Gpu { index } => format!("GPU {index}"),
        DeviceRef::Mig {
            parent_index,
            index,
        } => format!("MIG device {parent_index}:{index}"),
    }
}

/// The nodes of one device: `/dev/nvidia<minor>`; for a MIG device also its GI and CI cap nodes.
fn nodes_of(inv: &Inventory, dev: &DeviceRef) -> Result<Vec<DeviceNode>, CdiError> {
    let unknown = || CdiError::UnknownDevice {
        device: device_label(dev),
    };
    let (parent, mig) = match *dev {
        DeviceRef::Gpu { index } => (inv.gpu(index).ok_or_else(unknown)?, None),
        DeviceRef::Mig {
            parent_index,
            index,
        } => {
            let gpu = inv.gpu(parent_index).ok_or_else(unknown)?;
            let mig = gpu.mig_devices.iter().find(|m| m.index == index);
            (gpu, Some(mig.ok_or_else(unknown)?))
        }
    };
    let minor = parent.minor;
    let mut out = vec![node(inv, gpu_node_path(minor), inv.majors.nvidia, minor)?];
    for cap in mig.map_or(Vec::new(), |m| vec![m.gi_cap_minor, m.ci_cap_minor]) {
        let path = cap_node_path(cap);
        let major = inv
            .majors
            .nvidia_caps
            .ok_or_else(|| CdiError::MissingMajor {
                device: device_label(dev),
                path: path.clone(),
                major: "nvidia-caps",
            })?;
        out.push(node(inv, path, major, cap)?);
    }
    Ok(out)
}

/// The device nodes of `devices`, de-duplicated by path (a MIG parent appears once), in order.
pub fn device_nodes(inv: &Inventory, devices: &[DeviceRef]) -> Result<Vec<DeviceNode>, CdiError> {
    let mut out: Vec<DeviceNode> = Vec::new();
    for dev in devices {
        for n in nodes_of(inv, dev)? {
            if !out.iter().any(|o| o.path == n.path) {
                out.push(n);
            }
        }
    }
    Ok(out)
}

/// Whether an optional node is declared: not when discovery saw that it does not exist.
fn exists(inv: &Inventory, path: &str) -> bool {
    inv.node_state(path) != NodeState::Absent
}

/// Control nodes: `nvidiactl` for any GPU container, `nvidia-uvm{,-tools}` for compute (when the
/// uvm major is known), `nvidia-modeset` for display; the optional ones only where they exist.
pub fn control_nodes(
    inv: &Inventory,
    caps: &BTreeSet<Capability>,
) -> Result<Vec<DeviceNode>, CdiError> {
    let m = &inv.majors;
    let mut out = vec![node(
        inv,
        NVIDIACTL.into(),
        m.nvidia,
        gpuhook_node::NVIDIACTL_MINOR,
    )?];
    if caps.contains(&Capability::Compute) {
        if let Some(uvm) = m.nvidia_uvm {
            for (path, minor) in [(NVIDIA_UVM, 0), (NVIDIA_UVM_TOOLS, 1)] {
                if exists(inv, path) {
                    out.push(node(inv, path.into(), uvm, minor)?);
                }
            }
        }
    }
    if caps.contains(&Capability::Display) && exists(inv, NVIDIA_MODESET) {
        out.push(node(
            inv,
            NVIDIA_MODESET.into(),
            m.nvidia,
            gpuhook_node::NVIDIA_MODESET_MINOR,
        )?);
    }
    Ok(out)
}

#[cfg(test)]
#[path = "nodes_tests.rs"]
mod tests;
