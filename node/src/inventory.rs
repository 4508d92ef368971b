//! The inventory: everything gpuhook knows about a node after discovery.
//!
//! It is plain data, serialisable to JSON, so that `gpuhook cdi generate` can persist it and the
//! prestart hook can inject devices without loading NVML on the container start path.
//!
//! Paths come in two flavours:
//! - *driver paths* (`DriverFile::path`, ...) are absolute paths as the driver root itself sees them
//!   (`/usr/lib/x86_64-linux-gnu/libcuda.so.570.158.01`). That is also where they are mounted in a
//!   container. The host path is [`Inventory::host_path`] = `driver_root` + driver path.
//! - *device paths* (`/dev/nvidia0`) are container paths; their host path is `dev_root` + path.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Version of the serialised inventory format. Bump on incompatible change.
pub const INVENTORY_FORMAT_VERSION: u32 = 1;

/// Major number of the NVIDIA GPU character devices (`/dev/nvidia*`, `/dev/nvidiactl`).
pub const NVIDIA_MAJOR: u32 = 195;
/// Minor of `/dev/nvidiactl`.
pub const NVIDIACTL_MINOR: u32 = 255;
/// Minor of `/dev/nvidia-modeset`.
pub const NVIDIA_MODESET_MINOR: u32 = 254;

/// Everything discovered on a node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Inventory {
    pub format_version: u32,
    /// Root of the driver installation on the host (`/`, or e.g. `/run/nvidia/driver`).
    pub driver_root: PathBuf,
    /// Root under which `/dev/nvidia*` live on the host (defaults to `driver_root`).
    pub dev_root: PathBuf,
    /// e.g. `570.158.01`.
    pub driver_version: String,
    /// CUDA driver API version `major.minor` (e.g. `12.8`), when known (needs NVML).
    pub cuda_driver_version: Option<String>,
    pub majors: DeviceMajors,
    pub gpus: Vec<Gpu>,
    /// Cap minors of the MIG `config` and `monitor` capabilities, when the driver exposes them.
    pub mig_caps: Option<MigControlCaps>,
    pub files: DriverFiles,
    /// How GPUs were found.
    pub source: DiscoverySource,
}

/// Where the GPU list came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DiscoverySource {
    /// NVML from the driver root: full facts, MIG devices included.
    Nvml,
    /// `/proc/driver/nvidia/gpus/*/information` only: full GPUs, no MIG devices.
    Procfs,
}

/// Character-device majors of the driver's devices.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceMajors {
    /// Always 195 on real drivers; read from `/proc/devices` (`nvidia` / `nvidia-frontend`).
    pub nvidia: u32,
    pub nvidia_uvm: Option<u32>,
    pub nvidia_caps: Option<u32>,
    pub nvidia_caps_imex_channels: Option<u32>,
}

/// `/proc/driver/nvidia-caps/mig-minors` entries `config` and `monitor`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigControlCaps {
    pub config_minor: u32,
    pub monitor_minor: u32,
}

/// One full GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Gpu {
    /// NVML index.
    pub index: u32,
    /// `/dev/nvidia<minor>`.
    pub minor: u32,
    /// `GPU-xxxxxxxx-...`.
    pub uuid: String,
    /// NVML form, `00000000:07:00.0` (lower-case hex).
    pub pci_bus_id: String,
    pub name: String,
    /// Total memory in MiB (0 when unknown).
    pub memory_mib: u64,
    /// Lower-case architecture name (`hopper`), when known.
    pub architecture: Option<String>,
    /// `(major, minor)`, when known.
    pub compute_capability: Option<(u32, u32)>,
    /// Lower-case NVML brand (`tesla`, `nvidia`, ...), when known.
    pub brand: Option<String>,
    pub mig_enabled: bool,
    /// MIG devices in NVML enumeration order (so `N:M` is `gpus[N].mig_devices[M]`).
    pub mig_devices: Vec<MigDevice>,
}

/// One MIG device: a GPU instance + compute instance of a parent GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigDevice {
    /// Position in the parent's NVML MIG enumeration (the `M` of `N:M`).
    pub index: u32,
    /// NVML index of the parent GPU.
    pub parent_index: u32,
    pub gi_id: u32,
    pub ci_id: u32,
    /// `MIG-xxxxxxxx-...`.
    pub uuid: String,
    pub memory_mib: u64,
    /// e.g. `1g.10gb`, when known.
    pub profile: Option<String>,
    /// `/dev/nvidia-caps/nvidia-cap<gi_cap_minor>`.
    pub gi_cap_minor: u32,
    /// `/dev/nvidia-caps/nvidia-cap<ci_cap_minor>`.
    pub ci_cap_minor: u32,
}

/// A reference to one injectable device of an [`Inventory`]: a full GPU or a MIG device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum DeviceRef {
    /// `gpus[i]` where `gpus[i].index == index`.
    Gpu { index: u32 },
    /// MIG device `index` (NVML MIG enumeration order) of the GPU with NVML index `parent_index`.
    Mig { parent_index: u32, index: u32 },
}

/// A driver capability as named by `NVIDIA_DRIVER_CAPABILITIES`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Capability {
    Utility,
    Compute,
    Video,
    Graphics,
    Display,
    Ngx,
    Compat32,
}

impl Capability {
    /// All capabilities, in a stable order.
    pub const ALL: [Capability; 7] = [
        Capability::Utility,
        Capability::Compute,
        Capability::Video,
        Capability::Graphics,
        Capability::Display,
        Capability::Ngx,
        Capability::Compat32,
    ];

    /// The name used in `NVIDIA_DRIVER_CAPABILITIES`.
    pub fn as_str(self) -> &'static str {
        match self {
            Capability::Utility => "utility",
            Capability::Compute => "compute",
            Capability::Video => "video",
            Capability::Graphics => "graphics",
            Capability::Display => "display",
            Capability::Ngx => "ngx",
            Capability::Compat32 => "compat32",
        }
    }
}

/// A file of the driver installation, tagged with the capability that needs it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct DriverFile {
    pub capability: Capability,
    /// Absolute path as the driver root sees it (the real file, symlinks resolved inside the root).
    pub path: PathBuf,
}

/// A driver shared library.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct DriverLibrary {
    pub capability: Capability,
    /// Absolute path as the driver root sees it, e.g. `/usr/lib/x86_64-linux-gnu/libcuda.so.570.158.01`.
    pub path: PathBuf,
    /// The SONAME link name, e.g. `libcuda.so.1`, when known (from `ld.so.cache`).
    pub soname: Option<String>,
}

/// A symlink to create in the container (`link` -> `target`), both container paths.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ContainerSymlink {
    pub capability: Capability,
    pub target: PathBuf,
    pub link: PathBuf,
}

/// All driver files by kind.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DriverFiles {
    pub libraries: Vec<DriverLibrary>,
    pub binaries: Vec<DriverFile>,
    /// GSP firmware (`/lib/firmware/nvidia/<ver>/gsp_*.bin`), needed by every capability.
    pub firmware: Vec<PathBuf>,
    /// Unix sockets (persistenced, fabricmanager) and the MPS pipe dir, by capability.
    pub ipc: Vec<DriverFile>,
    /// Vulkan/EGL/GLVND/OpenCL config files, by capability.
    pub config_files: Vec<DriverFile>,
    /// Symlinks a container needs (`libcuda.so -> libcuda.so.1`, SONAME links, ...).
    pub symlinks: Vec<ContainerSymlink>,
    /// Folders (driver paths) that hold the libraries, for `update-ldcache`.
    pub library_dirs: Vec<PathBuf>,
    /// The driver's device nodes that exist under the dev root, with their mode and owner, sorted
    /// by path. `None` in an inventory not made by discovery (or saved by an older gpuhook): the
    /// nodes' existence and modes are then unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_nodes: Option<Vec<DevNode>>,
}

/// What an inventory knows about one device node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeState<'a> {
    /// It exists on the node, with this mode and owner.
    Present(&'a DevNode),
    /// Discovery looked and it does not exist.
    Absent,
    /// The inventory does not say (not made by discovery).
    Unknown,
}

impl Inventory {
    /// Host path of a driver path (`driver_root` + `path`).
    pub fn host_path(&self, driver_path: &Path) -> PathBuf {
        join_under(&self.driver_root, driver_path)
    }

    /// Host path of a device path such as `/dev/nvidia0` (`dev_root` + `path`).
    pub fn host_dev_path(&self, dev_path: &Path) -> PathBuf {
        join_under(&self.dev_root, dev_path)
    }

    /// Whether the device node at container path `path` exists on the node.
    pub fn node_state(&self, path: &str) -> NodeState<'_> {
        match &self.files.device_nodes {
            None => NodeState::Unknown,
            Some(nodes) => nodes
                .binary_search_by(|n| n.path.as_str().cmp(path))
                .map_or(NodeState::Absent, |i| NodeState::Present(&nodes[i])),
        }
    }

    /// Looks a GPU up by NVML index.
    pub fn gpu(&self, index: u32) -> Option<&Gpu> {
        self.gpus.iter().find(|g| g.index == index)
    }
}

/// Joins an absolute `path` under `root` (`/` + `/dev/x` = `/dev/x`, `/r` + `/dev/x` = `/r/dev/x`).
pub fn join_under(root: &Path, path: &Path) -> PathBuf {
    let rel = path.strip_prefix("/").unwrap_or(path);
    if rel.as_os_str().is_empty() {
        root.to_path_buf()
    } else {
        root.join(rel)
    }
}

/// One character device node found under the dev root.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct DevNode {
    /// Container path (`/dev/nvidia0`); the host path is `dev_root` + this.
    pub path: String,
    pub major: u32,
    pub minor: u32,
    /// Permission bits (`0o666`, `0o444`), without the file type.
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn join_under_root_and_prefix() {
        assert_eq!(
            join_under(Path::new("/"), Path::new("/dev/nvidia0")),
            PathBuf::from("/dev/nvidia0")
        );
        assert_eq!(
            join_under(Path::new("/r"), Path::new("/dev/nvidia0")),
            PathBuf::from("/r/dev/nvidia0")
        );
        assert_eq!(
            join_under(Path::new("/r"), Path::new("/")),
            PathBuf::from("/r")
        );
    }
}
