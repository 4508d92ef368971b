//! Specs of `nvidia-ctk cdi generate --mode` other than the per-GPU one.
//!
//! NVIDIA v1.20.0 (pkg/nvcdi/lib.go `New`, management.go, gated.go, lib-imex.go):
//! - `management`: one device `all` with every NVIDIA node of the node (GPU, control, MIG
//!   capability and IMEX channel nodes, but not `nvidia-fs*`, `nvidia-nvswitch*`,
//!   `nvidia-nvlink*`), plus the driver files as common edits: for monitoring containers
//!   (DCGM exporter) that must see every GPU whatever its MIG state;
//! - `gds`, `mofed`, `nvswitch`, `gdrcopy`: one device `all` with the nodes of that subsystem
//!   (internal/discover/gds.go, mofed.go, nvswitch.go, gdrcopy.go); gds also mounts
//!   `/run/udev` and `/etc/cufile.json`;
//! - `imex`: one device per IMEX channel, named by its number.
//!
//! Each is generated only where the node has what it describes: a mode whose nodes are absent
//! is an error naming what was looked for, not an empty spec.

use std::collections::BTreeSet;
use std::path::Path;

use gpuhook_node::devnodes::{scan_nodes, DevNode};
use gpuhook_node::{Capability, Inventory};

use crate::edits::{common_edits, path_str, RO_MOUNT_OPTIONS};
use crate::generate::{finish_spec, GenerateOptions, ALL_DEVICE};
use crate::spec::{ContainerEdits, Device, DeviceNode, Mount, Spec};
use crate::CdiError;

/// A generation mode of `nvidia-ctk cdi generate --mode` that gpuhook implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Management,
    Gds,
    Mofed,
    Nvswitch,
    Gdrcopy,
    Imex,
}

impl Mode {
    /// The class NVIDIA's library gives the mode's spec when none is asked for
    /// (pkg/nvcdi/options.go `getClassOrDefault`).
    pub fn default_class(self) -> &'static str {
        match self {
            Mode::Management => "gpu",
            Mode::Gds => "gds",
            Mode::Mofed => "mofed",
            Mode::Nvswitch => "nvswitch",
            Mode::Gdrcopy => "gdrcopy",
            Mode::Imex => "imex-channel",
        }
    }

    /// `(dir, name prefix)` of the nodes the mode describes, and what they are.
    fn patterns(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Mode::Management => &[
                ("/dev", "nvidia"),
                ("/dev/nvidia-caps", "nvidia-cap"),
                ("/dev/nvidia-caps-imex-channels", "channel"),
            ],
            Mode::Gds => &[("/dev", "nvidia-fs")],
            Mode::Mofed => &[
                ("/dev/infiniband", "uverbs"),
                ("/dev/infiniband", "rdma_cm"),
            ],
            Mode::Nvswitch => &[("/dev", "nvidia-nvswitch")],
            Mode::Gdrcopy => &[("/dev", "gdrdrv")],
            Mode::Imex => &[("/dev/nvidia-caps-imex-channels", "channel")],
        }
    }
}

/// Nodes management mode leaves out (management.go `nodeIsBlocked`).
const MANAGEMENT_BLOCKED: &[&str] = &["nvidia-fs", "nvidia-nvswitch", "nvidia-nvlink"];

fn nodes(inv: &Inventory, mode: Mode) -> Vec<DevNode> {
    let mut out: Vec<DevNode> = mode
        .patterns()
        .iter()
        .flat_map(|(dir, prefix)| scan_nodes(&inv.dev_root, dir, prefix))
        .filter(|n| {
            let name = n.path.rsplit('/').next().unwrap_or_default();
            mode != Mode::Management || !MANAGEMENT_BLOCKED.iter().any(|b| name.starts_with(b))
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

fn spec_node(inv: &Inventory, n: &DevNode) -> Result<DeviceNode, CdiError> {
    let host_path = (inv.dev_root != Path::new("/"))
        .then(|| path_str(&inv.host_dev_path(Path::new(&n.path))))
        .transpose()?;
    Ok(DeviceNode {
        path: n.path.clone(),
        host_path,
        device_type: Some("c".into()),
        major: Some(n.major.into()),
        minor: Some(n.minor.into()),
        file_mode: Some(n.mode),
        permissions: Some(crate::nodes::NODE_PERMISSIONS.into()),
        uid: Some(n.uid).filter(|&u| u != 0),
        gid: Some(n.gid).filter(|&g| g != 0),
    })
}

fn device(name: &str, nodes: Vec<DeviceNode>, mounts: Vec<Mount>) -> Device {
    Device {
        name: name.into(),
        annotations: Default::default(),
        container_edits: ContainerEdits {
            device_nodes: nodes,
            mounts,
            ..Default::default()
        },
    }
}

/// gds's mounts that exist under the driver root.
fn gds_mounts(inv: &Inventory) -> Result<Vec<Mount>, CdiError> {
    let mut out = Vec::new();
    for p in ["/etc/cufile.json", "/run/udev"] {
        let host = inv.host_path(Path::new(p));
        if std::fs::symlink_metadata(&host).is_ok() {
            out.push(Mount {
                host_path: path_str(&host)?,
                container_path: p.into(),
                options: RO_MOUNT_OPTIONS.iter().map(|s| s.to_string()).collect(),
                mount_type: None,
            });
        }
    }
    Ok(out)
}

/// Management's common edits: the driver's libraries, binaries, firmware and IPC sockets with the
/// links, CUDA-compat and ldcache steps (management.go `GetCommonEdits`:
/// `newDriverVersionDiscoverer`), without the graphics files and links, the device nodes (all
/// in the device), the params override and the application profile.
fn management_common(inv: &Inventory, opts: &GenerateOptions) -> Result<ContainerEdits, CdiError> {
    let mut driver = inv.clone();
    driver.files.config_files.clear();
    driver
        .files
        .libraries
        .retain(|l| !gpuhook_node::extras::is_graphics_library(&l.path));
    driver
        .files
        .symlinks
        .retain(|l| !gpuhook_node::extras::is_graphics_link(&l.link));
    let mut edits = opts.edits.clone();
    edits.disabled_hooks.extend(
        [
            "disable-device-node-modification",
            "update-application-profile",
        ]
        .map(String::from),
    );
    let caps: BTreeSet<Capability> = Capability::ALL.into_iter().collect();
    let mut common = common_edits(&driver, &caps, &edits)?;
    common.device_nodes.clear();
    Ok(common)
}

/// The spec of `mode` for the node; `opts` gives vendor, class and the hooks' options.
pub fn generate_mode(
    inv: &Inventory,
    mode: Mode,
    opts: &GenerateOptions,
) -> Result<Spec, CdiError> {
    let found = nodes(inv, mode);
    if found.is_empty() {
        let looked: Vec<String> = mode
            .patterns()
            .iter()
            .map(|(d, p)| format!("{}/{p}*", inv.host_dev_path(Path::new(d)).display()))
            .collect();
        return Err(CdiError::InvalidOption {
            option: "mode",
            message: format!(
                "{mode:?} mode: this node has no such device ({} do not exist); load the driver \
                 that provides them or leave out --mode",
                looked.join(", ")
            )
            .to_lowercase(),
        });
    }
    let spec_nodes: Vec<DeviceNode> = found
        .iter()
        .map(|n| spec_node(inv, n))
        .collect::<Result<_, _>>()?;
    let (devices, common) = match mode {
        Mode::Imex => {
            let devices = spec_nodes
                .into_iter()
                .map(|n| {
                    let id = n
                        .path
                        .rsplit("channel")
                        .next()
                        .unwrap_or_default()
                        .to_string();
                    device(&id, vec![n], Vec::new())
                })
                .collect();
            (devices, ContainerEdits::default())
        }
        Mode::Management => (
            vec![device(ALL_DEVICE, spec_nodes, Vec::new())],
            management_common(inv, opts)?,
        ),
        Mode::Gds => (
            vec![device(ALL_DEVICE, spec_nodes, gds_mounts(inv)?)],
            ContainerEdits::default(),
        ),
        _ => (
            vec![device(ALL_DEVICE, spec_nodes, Vec::new())],
            ContainerEdits::default(),
        ),
    };
    finish_spec(opts.kind(), devices, common)
}

#[cfg(test)]
#[path = "modes_tests.rs"]
mod tests;
