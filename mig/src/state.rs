//! What the manager knows of a GPU: its identity, MIG mode, the GPU instance profiles it offers
//! (with their placements) and the instances it has. Read from NVML by a [`crate::MigBackend`];
//! plain data, so planning is tested without NVML.

use crate::device_id::DeviceId;
use crate::profile::MigProfile;

/// A GPU instance's place: memory slices `start..start + size` (NVML's
/// `nvmlGpuInstancePlacement_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Placement {
    pub start: u32,
    pub size: u32,
}

impl Placement {
    pub fn end(&self) -> u32 {
        self.start.saturating_add(self.size)
    }

    pub fn overlaps(&self, other: &Placement) -> bool {
        self.start < other.end() && other.start < self.end()
    }
}

/// MIG mode of a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MigMode {
    /// NVML says `NOT_SUPPORTED`.
    NotCapable,
    /// `current` is in effect; `pending` takes effect after a GPU reset (equal when none waits).
    Capable { current: bool, pending: bool },
}

impl MigMode {
    pub fn enabled(&self) -> bool {
        matches!(self, MigMode::Capable { current: true, .. })
    }

    /// A mode change waits for a GPU reset or a reboot.
    pub fn pending_change(&self) -> bool {
        matches!(self, MigMode::Capable { current, pending } if current != pending)
    }
}

/// One GPU instance profile of a GPU (`nvmlGpuInstanceProfileInfo_v2_t` + placements).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GiProfileInfo {
    /// NVML profile id (`nvidia-smi mig -lgip`'s ID).
    pub id: u32,
    /// `1g.10gb`, `1g.10gb+me`: the GPU-instance name, as `mig-devices` keys spell it.
    pub name: String,
    /// Compute slices.
    pub slices: u32,
    /// How many instances of it the GPU can hold.
    pub instance_count: u32,
    pub memory_mib: u64,
    /// Where an instance may go (`nvmlDeviceGetGpuInstancePossiblePlacements_v2`).
    pub placements: Vec<Placement>,
    /// Its engine counts from NVML's profile info (`None`: not read, e.g. a test backend).
    pub engines: Option<gpuhook_node::nvml::MigEngines>,
}

/// A compute instance of a GPU instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComputeInstance {
    pub id: u32,
    /// NVML compute instance profile id.
    pub profile_id: u32,
    pub slices: u32,
    /// The MIG device's UUID, when the backend knows it.
    pub uuid: Option<String>,
}

/// A GPU instance and its compute instances.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuInstance {
    pub id: u32,
    pub profile_id: u32,
    pub placement: Placement,
    pub cis: Vec<ComputeInstance>,
}

/// One GPU as the manager sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuState {
    /// mig-parted's index: the GPU's position in PCI order (NVML's index).
    pub index: u32,
    pub uuid: String,
    /// NVML's name, e.g. `NVIDIA A100-SXM4-80GB`.
    pub model: String,
    pub device_id: DeviceId,
    pub mig: MigMode,
    /// GPU instance profiles (of a MIG-capable GPU, also with MIG mode off: NVML's v1 profile
    /// info and placements answer in either mode; `gpuhook_node::nvml::derived_name`).
    pub profiles: Vec<GiProfileInfo>,
    /// Compute slices of the whole GPU (7 on A100/H100, 4 on A30).
    pub compute_slices: u32,
    pub instances: Vec<GpuInstance>,
}

/// NVML's `NVML_COMPUTE_INSTANCE_PROFILE_*` for a compute instance of `slices` slices.
pub fn ci_profile_id(slices: u32) -> Option<u32> {
    Some(match slices {
        1 => 0,
        2 => 1,
        3 => 2,
        4 => 3,
        7 => 4,
        8 => 5,
        6 => 6,
        _ => return None,
    })
}

impl GpuState {
    /// The GPU instance profile named `gi_name` (`1g.10gb+me`).
    pub fn profile(&self, gi_name: &str) -> Option<&GiProfileInfo> {
        self.profiles.iter().find(|p| p.name == gi_name)
    }

    pub fn profile_by_id(&self, id: u32) -> Option<&GiProfileInfo> {
        self.profiles.iter().find(|p| p.id == id)
    }

    /// `"1g.10gb, 2g.20gb, …"`: the profiles the GPU has, for messages.
    pub fn profile_names(&self) -> String {
        let names: Vec<&str> = self.profiles.iter().map(|p| p.name.as_str()).collect();
        if names.is_empty() {
            "none (MIG is not enabled)".into()
        } else {
            names.join(", ")
        }
    }

    /// The current layout as `mig-devices` would spell it: canonical profile name -> count of
    /// MIG devices (compute instances). A compute instance whose GPU instance profile is unknown
    /// is named by its ids.
    pub fn layout(&self) -> std::collections::BTreeMap<String, u32> {
        let mut out = std::collections::BTreeMap::new();
        for gi in &self.instances {
            let gi_name = self
                .profile_by_id(gi.profile_id)
                .map(|p| p.name.clone())
                .unwrap_or_else(|| format!("unknown-gi-profile-{}", gi.profile_id));
            for ci in &gi.cis {
                let name = match MigProfile::parse(&gi_name) {
                    Ok(mut p) => {
                        p.compute = ci.slices;
                        p.to_string()
                    }
                    Err(_) => gi_name.clone(),
                };
                *out.entry(name).or_insert(0) += 1;
            }
        }
        out
    }
}
