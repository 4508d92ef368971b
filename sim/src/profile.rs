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
//! nvidia_uvm_tools = true                        # /dev/nvidia-uvm-tools (needs nvidia_uvm)
//! dev_links = ["libcuda.so", "libnvidia-ml.so"]  # optional: `.so` links (default: see DEFAULT_DEV_LINKS)
//! lib32_dir = "/usr/lib/i386-linux-gnu"          # optional: 32-bit (i386) driver libraries
//! gbm = false                                    # GBM backend link, libnvidia-egl-gbm, its json
//! xorg = false                                   # X driver, GLX server module, xorg.conf.d, Wayland EGL
//! application_profiles = false                   # /usr/share/nvidia/nvidia-application-profiles-<ver>-*
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
    /// The machine's DMI product name (`/sys/class/dmi/id/product_name`), when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<String>,
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
    /// `/dev/nvidia-uvm-tools` (some installs, e.g. containers' driver roots, lack it).
    pub nvidia_uvm_tools: bool,
    /// Library stems (`libcuda.so`) that get a development link `<stem> -> <soname>`.
    pub dev_links: Vec<String>,
    /// Directory of the 32-bit (i386) libraries; `None`: a 64-bit-only install.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lib32_dir: Option<String>,
    /// The GBM backend (`<lib_dir>/gbm/nvidia-drm_gbm.so -> ../libnvidia-allocator.so.1`),
    /// `libnvidia-egl-gbm.so.1` and `15_nvidia_gbm.json`.
    pub gbm: bool,
    /// X.org driver and GLX server module, `10-nvidia.conf`, Wayland EGL library and json.
    pub xorg: bool,
    /// `/usr/share/nvidia/nvidia-application-profiles-<ver>-{rc,key-documentation}`.
    pub application_profiles: bool,
}

/// Development links of a default profile: the ones the driver's `.run` installer makes for
/// libraries applications link against at build time.
pub const DEFAULT_DEV_LINKS: &[&str] = &[
    "libnvidia-ml.so",
    "libcuda.so",
    "libnvidia-encode.so",
    "libnvidia-opticalflow.so",
    "libnvcuvid.so",
];

impl Default for Features {
    fn default() -> Self {
        Self {
            nvidia_uvm: true,
            nvidia_modeset: true,
            persistenced_socket: true,
            fabricmanager_socket: false,
            graphics: true,
            gsp_firmware: true,
            nvidia_uvm_tools: true,
            dev_links: DEFAULT_DEV_LINKS.iter().map(|s| s.to_string()).collect(),
            lib32_dir: None,
            gbm: false,
            xorg: false,
            application_profiles: false,
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
    /// NUMA node of the GPU's PCI device (`/sys/bus/pci/devices/<bus>/numa_node`); `None`: -1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa_node: Option<u32>,
    /// NVLinks from this GPU to the node's NVSwitch fabric (0: PCIe only).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub nvlinks: u32,
    /// PCI class (`/sys/bus/pci/devices/<bus>/class`): `0x030200` (3D controller, the default for
    /// data-centre GPUs) or `0x030000` (VGA controller: a GPU with display outputs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci_class: Option<u32>,
}

fn is_zero(v: &u32) -> bool {
    *v == 0
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

/// Minor number of `/dev/nvidia-caps/nvidia-cap<N>` for the MIG `config` capability.
pub const MIG_CONFIG_CAP_MINOR: u32 = 1;
/// Minor number of `/dev/nvidia-caps/nvidia-cap<N>` for the MIG `monitor` capability.
pub const MIG_MONITOR_CAP_MINOR: u32 = 2;
/// GPU instance ids per GPU that the driver reserves cap minors for (`gi0`..`gi14`).
pub const MIG_MAX_GPU_INSTANCES: u32 = 15;
/// Compute instance ids per GPU instance that the driver reserves cap minors for (`ci0`..`ci7`).
pub const MIG_MAX_COMPUTE_INSTANCES: u32 = 8;

/// Cap minor of `gpu<gpu_minor>/gi<gi>/access`, as the driver numbers them in
/// `/proc/driver/nvidia-caps/mig-minors`: after `config` (1) and `monitor` (2), every GPU minor
/// owns a block of 15 GIs, each one `access` minor followed by 8 CI minors.
pub fn gi_cap_minor(gpu_minor: u32, gi_id: u32) -> u32 {
    3 + gpu_minor * MIG_MAX_GPU_INSTANCES * (1 + MIG_MAX_COMPUTE_INSTANCES)
        + gi_id * (1 + MIG_MAX_COMPUTE_INSTANCES)
}

/// Cap minor of `gpu<gpu_minor>/gi<gi>/ci<ci>/access` (see [`gi_cap_minor`]).
pub fn ci_cap_minor(gpu_minor: u32, gi_id: u32, ci_id: u32) -> u32 {
    gi_cap_minor(gpu_minor, gi_id) + 1 + ci_id
}

impl NodeProfile {
    /// Serialises the profile back to TOML.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("a NodeProfile always serialises to TOML")
    }

    /// Every MIG device of the node with its parent GPU, in profile (NVML) order.
    pub fn mig_devices(&self) -> impl Iterator<Item = (&GpuProfile, &MigDeviceProfile)> {
        self.gpus
            .iter()
            .flat_map(|g| g.mig_devices.iter().map(move |m| (g, m)))
    }
}

impl GpuProfile {
    /// The PCI address as the kernel writes it (`0000:07:00.0`, 4-digit domain, lower case), the
    /// directory name under `/proc/driver/nvidia/gpus/`.
    pub fn kernel_bus_id(&self) -> String {
        let lower = self.pci_bus_id.to_ascii_lowercase();
        match lower.split_once(':') {
            Some((domain, rest)) if domain.len() == 8 => format!("{}:{rest}", &domain[4..]),
            _ => lower,
        }
    }
}
