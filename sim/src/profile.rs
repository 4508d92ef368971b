//! Node profiles: a declarative (TOML) description of a GPU node.
//!
//! A profile is the single source of truth for a simulated node. The materialiser turns it into a
//! driver root (device nodes, `/proc` files, libraries), and the mock NVML library reads the same
//! profile (installed beside itself as [`PROFILE_FILE_NAME`]) so that every view of the simulated node
//! agrees. Built-in reference profiles live in `sim/profiles/*.toml` and are compiled in.
//!
//! Format (all keys required unless marked optional):
//!
//! ```toml
//! name = "a100-mig-mixed"
//! description = "2x A100-SXM4-80GB ..."          # optional
//! driver_version = "570.158.01"
//! cuda_driver_version = "12.8"                   # major.minor, as NVML reports it
//! lib_dir = "/usr/lib/x86_64-linux-gnu"          # or "/usr/lib64" (RPM-style)
//!
//! [majors]                                       # dynamic char majors from /proc/devices
//! nvidia_uvm = 510
//! nvidia_caps = 511
//! nvidia_caps_imex_channels = 509                # optional
//!
//! [features]                                     # optional parts of the driver install
//! nvidia_uvm = true
//! nvidia_modeset = true
//! persistenced_socket = true
//! fabricmanager_socket = false
//! graphics = true                                # graphics libs + Vulkan/EGL/GLVND config files
//! gsp_firmware = true
//!
//! [[gpus]]
//! index = 0                                      # NVML index
//! minor = 0                                      # /dev/nvidia<minor>
//! uuid = "GPU-0b3b1a6c-..."
//! pci_bus_id = "00000000:07:00.0"                # NVML form, 8-hex-digit domain
//! name = "NVIDIA A100-SXM4-80GB"
//! architecture = "ampere"                        # kepler..blackwell
//! compute_capability = "8.0"
//! brand = "nvidia"                               # NVML brand: tesla, nvidia, geforce, quadro, ...
//! memory_mib = 81920
//! mig_mode = true
//!
//! [[gpus.mig_devices]]                           # only when mig_mode = true, in NVML order
//! profile = "3g.40gb"
//! gi_id = 2
//! ci_id = 0
//! uuid = "MIG-..."
//! memory_mib = 40192
//! gi_cap_minor = 21                              # /dev/nvidia-caps/nvidia-cap<N> of the GPU instance
//! ci_cap_minor = 22                              # ... of the compute instance
//! ```

use serde::{Deserialize, Serialize};

/// File name under which the materialiser installs the profile beside the mock NVML library.
pub const PROFILE_FILE_NAME: &str = "gpuhook-sim-profile.toml";

/// A whole simulated node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeProfile {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Kernel module / user-space driver version, e.g. `570.158.01`.
    pub driver_version: String,
    /// CUDA driver API version as `major.minor`, e.g. `12.8`.
    pub cuda_driver_version: String,
    /// Absolute directory (inside the driver root) that holds the driver libraries.
    pub lib_dir: String,
    pub majors: DynamicMajors,
    #[serde(default)]
    pub features: Features,
    pub gpus: Vec<GpuProfile>,
}

/// Character-device majors that the kernel assigns dynamically (listed in `/proc/devices`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DynamicMajors {
    pub nvidia_uvm: u32,
    pub nvidia_caps: u32,
    #[serde(default)]
    pub nvidia_caps_imex_channels: Option<u32>,
}

/// Optional parts of a driver installation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Features {
    pub nvidia_uvm: bool,
    pub nvidia_modeset: bool,
    pub persistenced_socket: bool,
    pub fabricmanager_socket: bool,
    pub graphics: bool,
    pub gsp_firmware: bool,
}

impl Default for Features {
    fn default() -> Self {
        Self {
            nvidia_uvm: true,
            nvidia_modeset: true,
            persistenced_socket: true,
            fabricmanager_socket: false,
            graphics: true,
            gsp_firmware: true,
        }
    }
}

/// One physical GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuProfile {
    pub index: u32,
    pub minor: u32,
    pub uuid: String,
    pub pci_bus_id: String,
    pub name: String,
    pub architecture: String,
    pub compute_capability: String,
    pub brand: String,
    pub memory_mib: u64,
    #[serde(default)]
    pub mig_mode: bool,
    #[serde(default)]
    pub mig_devices: Vec<MigDeviceProfile>,
}

/// One MIG device (a GPU instance + compute instance pair) of a GPU in MIG mode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MigDeviceProfile {
    pub profile: String,
    pub gi_id: u32,
    pub ci_id: u32,
    pub uuid: String,
    pub memory_mib: u64,
    pub gi_cap_minor: u32,
    pub ci_cap_minor: u32,
}
