//! Character device nodes of a driver install, as the NVIDIA kernel modules (and
//! nvidia-modprobe) create them: `/dev/nvidia<minor>`, the control nodes, UVM, and the
//! `nvidia-caps` nodes of MIG capabilities. The nodes are real (`mknod`), so a container's device
//! cgroup treats them like the real ones (ENXIO when allowed, EPERM when denied).

use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::Path;

use nix::sys::stat::{makedev, mknod, Mode, SFlag};

use super::fsutil::{io, mkdirs, under};
use super::SimError;
use crate::profile::{NodeProfile, MIG_CONFIG_CAP_MINOR, MIG_MONITOR_CAP_MINOR};

/// Major of `/dev/nvidia*` (fixed by the driver).
pub const NVIDIA_MAJOR: u32 = 195;
/// Minor of `/dev/nvidiactl`.
pub const NVIDIACTL_MINOR: u32 = 255;
/// Minor of `/dev/nvidia-modeset`.
pub const MODESET_MINOR: u32 = 254;

/// One character device node to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceNode {
    /// Path inside the driver root, e.g. `/dev/nvidia0`.
    pub path: String,
    pub major: u32,
    pub minor: u32,
    /// Permission bits, as the driver creates them.
    pub mode: u32,
}

fn node(path: String, major: u32, minor: u32, mode: u32) -> DeviceNode {
    DeviceNode {
        path,
        major,
        minor,
        mode,
    }
}

/// Every device node of the profile, in a stable order.
pub fn device_nodes(p: &NodeProfile) -> Vec<DeviceNode> {
    let mut nodes: Vec<DeviceNode> = p
        .gpus
        .iter()
        .map(|g| {
            node(
                format!("/dev/nvidia{}", g.minor),
                NVIDIA_MAJOR,
                g.minor,
                0o666,
            )
        })
        .collect();
    nodes.push(node(
        "/dev/nvidiactl".into(),
        NVIDIA_MAJOR,
        NVIDIACTL_MINOR,
        0o666,
    ));
    if p.features.nvidia_modeset {
        nodes.push(node(
            "/dev/nvidia-modeset".into(),
            NVIDIA_MAJOR,
            MODESET_MINOR,
            0o666,
        ));
    }
    if p.features.nvidia_uvm {
        nodes.push(node(
            "/dev/nvidia-uvm".into(),
            p.majors.nvidia_uvm,
            0,
            0o666,
        ));
        if p.features.nvidia_uvm_tools {
            nodes.push(node(
                "/dev/nvidia-uvm-tools".into(),
                p.majors.nvidia_uvm,
                1,
                0o666,
            ));
        }
    }
    let caps = p.majors.nvidia_caps;
    let cap = |minor: u32, mode: u32| {
        node(
            format!("/dev/nvidia-caps/nvidia-cap{minor}"),
            caps,
            minor,
            mode,
        )
    };
    // nvidia-modprobe creates the MIG config capability root-only and monitor world-readable.
    nodes.push(cap(MIG_CONFIG_CAP_MINOR, 0o400));
    nodes.push(cap(MIG_MONITOR_CAP_MINOR, 0o444));
    for (_, m) in p.mig_devices() {
        if !nodes
            .iter()
            .any(|n| n.major == caps && n.minor == m.gi_cap_minor)
        {
            nodes.push(cap(m.gi_cap_minor, 0o444));
        }
        nodes.push(cap(m.ci_cap_minor, 0o444));
    }
    nodes
}

/// True when the process may create device nodes (CAP_MKNOD in its effective set).
pub fn can_mknod() -> bool {
    const CAP_MKNOD: u32 = 27;
    let Ok(status) = fs::read_to_string("/proc/self/status") else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << CAP_MKNOD) != 0)
}

/// Creates (or fixes) one node; an existing node with the right type and numbers is kept.
pub(super) fn apply_node(root: &Path, n: &DeviceNode) -> Result<(), SimError> {
    let path = under(root, &n.path);
    let rdev = makedev(u64::from(n.major), u64::from(n.minor));
    if let Ok(meta) = fs::symlink_metadata(&path) {
        if meta.file_type().is_char_device() && meta.rdev() == rdev {
            if meta.mode() & 0o7777 != n.mode {
                fs::set_permissions(&path, fs::Permissions::from_mode(n.mode))
                    .map_err(io("chmod", &path))?;
            }
            return Ok(());
        }
        if meta.is_dir() {
            fs::remove_dir_all(&path).map_err(io("remove wrong directory", &path))?;
        }
    }
    if let Some(parent) = path.parent() {
        mkdirs(parent)?;
    }
    let tmp = path.with_file_name(format!(".mknod.gpuhook-sim-tmp.{}", std::process::id()));
    let _ = fs::remove_file(&tmp);
    mknod(&tmp, SFlag::S_IFCHR, Mode::from_bits_truncate(n.mode), rdev).map_err(|e| {
        SimError::Io {
            op: "mknod",
            path: tmp.clone(),
            error: e.into(),
        }
    })?;
    // mknod is subject to the umask; set the exact mode.
    fs::set_permissions(&tmp, fs::Permissions::from_mode(n.mode)).map_err(io("chmod", &tmp))?;
    fs::rename(&tmp, &path).map_err(io("rename into place", &path))
}

/// Creates every node of the profile under `root`. Returns how many nodes there are.
pub fn create(root: &Path, p: &NodeProfile) -> Result<usize, SimError> {
    let nodes = device_nodes(p);
    for n in &nodes {
        apply_node(root, n)?;
    }
    Ok(nodes.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mig_node_plan_has_one_gi_and_one_ci_node_per_device() {
        let p = NodeProfile::builtin("a100-mig-mixed").unwrap();
        let nodes = device_nodes(&p);
        let caps: Vec<u32> = nodes
            .iter()
            .filter(|n| n.major == p.majors.nvidia_caps)
            .map(|n| n.minor)
            .collect();
        // config + monitor + (gi + ci) for 10 MIG devices.
        assert_eq!(caps.len(), 2 + 2 * 10);
        assert!(
            caps.contains(&21) && caps.contains(&22),
            "GPU 0 GI 2: {caps:?}"
        );
        assert!(caps.contains(&(3 + 135 + 7 * 9)), "GPU 1 GI 7: {caps:?}");
        let ctl = nodes.iter().find(|n| n.path == "/dev/nvidiactl").unwrap();
        assert_eq!((ctl.major, ctl.minor, ctl.mode), (195, 255, 0o666));
    }

    #[test]
    fn gpu_nodes_use_the_device_minor_not_the_index() {
        let p = NodeProfile::builtin("dgx-h100").unwrap();
        let nodes = device_nodes(&p);
        for g in &p.gpus {
            let n = nodes
                .iter()
                .find(|n| n.path == format!("/dev/nvidia{}", g.minor))
                .unwrap();
            assert_eq!((n.major, n.minor), (195, g.minor));
        }
    }
}
