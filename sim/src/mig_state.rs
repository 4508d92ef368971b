//! The simulated MIG layout of a GPU once something changed it through the mock NVML's write
//! calls (`nvmlDeviceSetMigMode`, create/destroy of GPU and compute instances).
//!
//! The node profile describes the layout at "boot"; the first write persists the GPU's layout as
//! `mig-<uuid>.json` in the mock's state directory (`<lib dir>/gpuhook-sim-state/`), and from then
//! on every process that loads the mock sees that file instead of the profile's MIG devices, as
//! every process on a real node sees the driver's one layout. Switch files in the same directory
//! model what NVML cannot be told through its API:
//!
//! - `mig-needs-reset-<uuid>`: a MIG mode change stays *pending* (NVML reports current != pending)
//!   until the file is removed; the next `nvmlInit` then finds the GPU "reset" and the pending
//!   mode in effect (with no instances, as after a real reset).
//! - `in-use-<uuid>`: a process holds the GPU; destroying an instance or changing the mode fails
//!   with `NVML_ERROR_IN_USE`.
//! - `count-calls`: when present, the mock appends the name of every NVML call it serves to
//!   `calls.log` (benchmarks count calls and writes).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The state directory's name below the mock's library directory.
pub const STATE_DIR: &str = "gpuhook-sim-state";
/// File whose content is bumped on every MIG write (processes reload when it changes).
pub const GENERATION_FILE: &str = "mig-generation";

/// A compute instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimCi {
    pub id: u32,
    /// `NVML_COMPUTE_INSTANCE_PROFILE_*` (= its profile id).
    pub profile: u32,
    pub slices: u32,
    pub uuid: String,
}

/// A GPU instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimGi {
    pub id: u32,
    /// GPU instance profile id.
    pub profile_id: u32,
    pub start: u32,
    pub size: u32,
    pub cis: Vec<SimCi>,
}

/// A GPU's MIG mode and instances.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SimMigGpu {
    pub mig_enabled: bool,
    /// The mode a pending change will bring (`None`: nothing pending).
    #[serde(default)]
    pub pending: Option<bool>,
    #[serde(default)]
    pub instances: Vec<SimGi>,
    /// Bumped on every instance creation, so new MIG devices get new UUIDs.
    #[serde(default)]
    pub serial: u64,
}

pub fn state_dir(lib_dir: &Path) -> PathBuf {
    lib_dir.join(STATE_DIR)
}

pub fn layout_file(lib_dir: &Path, gpu_uuid: &str) -> PathBuf {
    state_dir(lib_dir).join(format!("mig-{gpu_uuid}.json"))
}

pub fn needs_reset_file(lib_dir: &Path, gpu_uuid: &str) -> PathBuf {
    state_dir(lib_dir).join(format!("mig-needs-reset-{gpu_uuid}"))
}

pub fn in_use_file(lib_dir: &Path, gpu_uuid: &str) -> PathBuf {
    state_dir(lib_dir).join(format!("in-use-{gpu_uuid}"))
}

/// The persisted layout of a GPU; `Ok(None)` when none was written (the profile's holds).
pub fn load(lib_dir: &Path, gpu_uuid: &str) -> Result<Option<SimMigGpu>, String> {
    let path = layout_file(lib_dir, gpu_uuid);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| format!("{}: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// Writes a GPU's layout atomically and bumps the generation.
pub fn save(lib_dir: &Path, gpu_uuid: &str, state: &SimMigGpu) -> std::io::Result<()> {
    let dir = state_dir(lib_dir);
    std::fs::create_dir_all(&dir)?;
    let bytes = serde_json::to_vec_pretty(state).map_err(std::io::Error::other)?;
    write_atomic(&layout_file(lib_dir, gpu_uuid), &bytes)?;
    let next = generation(lib_dir).wrapping_add(1);
    write_atomic(&dir.join(GENERATION_FILE), next.to_string().as_bytes())
}

/// The generation counter (0 before any write).
pub fn generation(lib_dir: &Path) -> u64 {
    std::fs::read_to_string(state_dir(lib_dir).join(GENERATION_FILE))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

/// A MIG UUID for compute instance `ci` of GPU instance `gi`, unique per `serial`.
pub fn mig_uuid(gpu_uuid: &str, gi: u32, ci: u32, serial: u64) -> String {
    use std::hash::{Hash, Hasher};
    let half = |salt: u8| {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (gpu_uuid, gi, ci, serial, salt).hash(&mut h);
        h.finish()
    };
    let x = format!("{:016x}{:016x}", half(1), half(2));
    format!(
        "MIG-{}-{}-{}-{}-{}",
        &x[0..8],
        &x[8..12],
        &x[12..16],
        &x[16..20],
        &x[20..32]
    )
}
