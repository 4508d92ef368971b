//! Resolving a parsed config against the node's GPUs: which GPU gets which limits.
//!
//! Every check that needs the node happens here, before anything is started, so that a bad
//! config fails as a whole with a message naming the key (and a reload with a bad config leaves
//! the running daemons alone).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::config::{ConfigError, ConfigFile, DEFAULT_MPS_ROOT};
use crate::inventory::{default_control_binary, GpuFacts};
use crate::plan_select::{find, select};
use crate::settings::{share_limits, CdiSettings, EnforceSettings, ShareLimits};
pub use crate::settings::{Overrides, Timing};

/// `sun_path` of `sockaddr_un` holds 108 bytes including the terminating NUL.
pub const MAX_SOCKET_PATH: usize = 107;

/// Everything that defines one GPU's control daemon; a change means a restart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuPlan {
    pub index: u32,
    pub uuid: String,
    /// Resource name from the config.
    pub resource: String,
    pub replicas: u32,
    pub memory_mib: u64,
    /// `set_default_active_thread_percentage`.
    pub active_thread_percentage: u32,
    /// `set_default_device_pinned_mem_limit 0 <n>M`; `None` when the GPU's memory is unknown.
    pub pinned_memory_limit_mib: Option<u64>,
    pub shm_size: Option<u64>,
    pub driver_root: PathBuf,
    pub control_binary: PathBuf,
    /// Client limits of each CDI device of this GPU: the default share first, then the
    /// configured fractions. The server limits above are the largest of these.
    pub shares: Vec<ShareLimits>,
    /// `mpsDaemon.clientUser`: the only uid whose containers may use this GPU's shares.
    pub client_user: Option<u32>,
}

/// A resolved configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub mps_root: PathBuf,
    pub timing: Timing,
    pub gpus: Vec<GpuPlan>,
    pub cdi: CdiSettings,
    pub enforce: EnforceSettings,
    /// Non-fatal remarks (e.g. MIG-enabled GPUs skipped by `devices: all`).
    pub warnings: Vec<String>,
}

/// Checks `cfg` against `gpus` and computes each GPU's limits.
pub fn resolve(cfg: &ConfigFile, gpus: &[GpuFacts], ov: &Overrides) -> Result<Plan, ConfigError> {
    let mut roots = Roots::resolve(cfg, ov)?;
    let timing = crate::plan_settings::resolve_timing(cfg, ov)?;
    let share_defs = crate::plan_settings::resolve_shares(cfg)?;
    let cdi = crate::plan_settings::resolve_cdi(cfg, ov)?;
    let enforce = crate::plan_settings::resolve_enforce(cfg)?;
    roots.shm_size = shm_size(cfg)?;
    let resources = cfg
        .sharing
        .mps
        .as_ref()
        .map(|m| m.resources.as_slice())
        .unwrap_or(&[]);
    let mut warnings = cfg.warnings.clone();
    if resources.is_empty() {
        // One ConfigMap may serve time-sliced nodes too: nothing to run here is not an error.
        warnings.push(
            "no sharing.mps section: no GPU is shared with MPS; the daemon idles and reports ready"
                .to_string(),
        );
    }
    let mut out = plan_resources(resources, gpus, &roots, &mut warnings)?;
    apply_overrides(cfg, gpus, &mut out)?;
    for g in &mut out {
        apply_shares(g, &share_defs);
    }
    for g in &out {
        check_socket_path(&roots.mps_root, &g.uuid)?;
    }
    out.sort_by_key(|g| g.index);
    Ok(Plan {
        mps_root: roots.mps_root,
        timing,
        gpus: out,
        cdi,
        enforce,
        warnings,
    })
}

/// The paths and sizes every GPU of the plan shares: command line first, then the file.
struct Roots {
    mps_root: PathBuf,
    driver_root: PathBuf,
    control_binary: PathBuf,
    /// `mpsDaemon.shmSize`, checked after the other settings.
    shm_size: Option<u64>,
    client_user: Option<u32>,
}

impl Roots {
    fn resolve(cfg: &ConfigFile, ov: &Overrides) -> Result<Self, ConfigError> {
        let d = &cfg.mps_daemon;
        let mps_root = ov
            .mps_root
            .clone()
            .or_else(|| d.mps_root.clone())
            .unwrap_or_else(|| PathBuf::from(DEFAULT_MPS_ROOT));
        if !mps_root.is_absolute() {
            return Err(ConfigError::invalid(
                "mpsDaemon.mpsRoot",
                "must be an absolute path",
            ));
        }
        let driver_root = ov
            .driver_root
            .clone()
            .or_else(|| d.driver_root.clone())
            .unwrap_or_else(|| PathBuf::from("/"));
        let control_binary = ov
            .control_binary
            .clone()
            .or_else(|| d.control_binary.clone())
            .unwrap_or_else(|| default_control_binary(&driver_root));
        Ok(Roots {
            mps_root,
            driver_root,
            control_binary,
            shm_size: None,
            client_user: d.client_user,
        })
    }
}

/// `mpsDaemon.shmSize`, at least 1 MiB.
fn shm_size(cfg: &ConfigFile) -> Result<Option<u64>, ConfigError> {
    match cfg.mps_daemon.shm_size {
        Some(s) if s.0 < (1 << 20) => Err(ConfigError::invalid(
            "mpsDaemon.shmSize",
            "must be at least 1Mi",
        )),
        s => Ok(s.map(|s| s.0)),
    }
}

/// One [`GpuPlan`] per GPU of each `sharing.mps.resources[]` entry, with the default limits
/// (`1/replicas` of the threads and of the memory).
fn plan_resources(
    resources: &[crate::config::Resource],
    gpus: &[GpuFacts],
    roots: &Roots,
    warnings: &mut Vec<String>,
) -> Result<Vec<GpuPlan>, ConfigError> {
    let mut names: BTreeMap<&str, usize> = BTreeMap::new();
    // GPU index -> (resource position, name)
    let mut owner: BTreeMap<u32, (usize, &str)> = BTreeMap::new();
    let mut out: Vec<GpuPlan> = Vec::new();
    for (i, r) in resources.iter().enumerate() {
        let key = format!("sharing.mps.resources[{i}]");
        if r.name.trim().is_empty() {
            return Err(ConfigError::invalid(
                format!("{key}.name"),
                "must not be empty",
            ));
        }
        if let Some(prev) = names.insert(&r.name, i) {
            return Err(ConfigError::invalid(
                format!("{key}.name"),
                format!("duplicate resource name {:?} (also sharing.mps.resources[{prev}]); use one entry per name", r.name),
            ));
        }
        let replicas = u32::try_from(r.replicas)
            .ok()
            .filter(|n| *n >= 1)
            .ok_or_else(|| {
                ConfigError::invalid(
                    format!("{key}.replicas"),
                    format!("must be at least 1, got {}", r.replicas),
                )
            })?;
        for (g, dkey) in select(&r.devices, gpus, &format!("{key}.devices"), warnings)? {
            check_replicas(g, replicas, &key)?;
            if let Some((pi, pname)) = owner.insert(g.index, (i, &r.name)) {
                return Err(ConfigError::invalid(
                    dkey,
                    format!(
                        "GPU {} ({}) is already shared by resource {pname:?} (sharing.mps.resources[{pi}]); a GPU can belong to one MPS resource only",
                        g.index, g.uuid
                    ),
                ));
            }
            out.push(GpuPlan {
                index: g.index,
                uuid: g.uuid.clone(),
                resource: r.name.clone(),
                replicas,
                memory_mib: g.memory_mib,
                active_thread_percentage: 100 / replicas,
                pinned_memory_limit_mib: (g.memory_mib > 0)
                    .then(|| g.memory_mib / u64::from(replicas)),
                shm_size: roots.shm_size,
                driver_root: roots.driver_root.clone(),
                control_binary: roots.control_binary.clone(),
                shares: Vec::new(),
                client_user: roots.client_user,
            });
        }
    }
    Ok(out)
}

/// `replicas` within what NVIDIA allows MPS on GPU `g` (by compute capability).
fn check_replicas(g: &GpuFacts, replicas: u32, key: &str) -> Result<(), ConfigError> {
    let max = crate::kdp::max_mps_replicas(g.compute_capability);
    if replicas > max {
        return Err(ConfigError::invalid(
            format!("{key}.replicas"),
            format!(
                "{replicas} > {max}: GPU {} ({}) of compute capability {} serves at most {max} MPS clients (as NVIDIA caps it)",
                g.index,
                g.uuid,
                g.compute_capability.map_or("unknown".to_string(), |(a, b)| format!("{a}.{b}"))
            ),
        ));
    }
    Ok(())
}

/// The GPU's shares, and its server limits raised to the largest share: clients can only
/// lower their server's limits.
fn apply_shares(g: &mut GpuPlan, share_defs: &[crate::settings::Share]) {
    g.shares = share_limits(
        g.active_thread_percentage,
        g.pinned_memory_limit_mib,
        g.memory_mib,
        share_defs,
    );
    g.active_thread_percentage = g
        .shares
        .iter()
        .map(|s| s.active_thread_percentage)
        .max()
        .unwrap_or(g.active_thread_percentage);
    if g.pinned_memory_limit_mib.is_some() {
        g.pinned_memory_limit_mib = g
            .shares
            .iter()
            .filter_map(|s| s.pinned_memory_limit_mib)
            .max();
    }
}

fn apply_overrides(
    cfg: &ConfigFile,
    gpus: &[GpuFacts],
    out: &mut [GpuPlan],
) -> Result<(), ConfigError> {
    let mut seen: BTreeMap<u32, usize> = BTreeMap::new();
    for (i, o) in cfg.mps_daemon.gpus.iter().enumerate() {
        let key = format!("mpsDaemon.gpus[{i}]");
        let g = find(&o.device, gpus, &format!("{key}.device"))?;
        if let Some(prev) = seen.insert(g.index, i) {
            return Err(ConfigError::invalid(
                format!("{key}.device"),
                format!(
                    "GPU {} already has overrides in mpsDaemon.gpus[{prev}]; merge them",
                    g.index
                ),
            ));
        }
        let plan = out.iter_mut().find(|p| p.index == g.index).ok_or_else(|| {
            ConfigError::invalid(
                format!("{key}.device"),
                format!(
                    "GPU {} ({}) is not shared by any sharing.mps resource; add it to one",
                    g.index, g.uuid
                ),
            )
        })?;
        if let Some(p) = o.active_thread_percentage {
            if !(1..=100).contains(&p) {
                return Err(ConfigError::invalid(
                    format!("{key}.activeThreadPercentage"),
                    format!("must be between 1 and 100, got {p}"),
                ));
            }
            plan.active_thread_percentage = u32::try_from(p).unwrap_or(100);
        }
        if let Some(m) = o.pinned_memory_limit_mib {
            let mib = u64::try_from(m).ok().filter(|m| *m >= 1);
            let Some(mib) = mib.filter(|m| g.memory_mib == 0 || *m <= g.memory_mib) else {
                return Err(ConfigError::invalid(
                    format!("{key}.pinnedMemoryLimitMiB"),
                    format!(
                        "must be between 1 and the GPU's memory ({} MiB), got {m}",
                        g.memory_mib
                    ),
                ));
            };
            plan.pinned_memory_limit_mib = Some(mib);
        }
    }
    Ok(())
}

/// Fails when `<mpsRoot>/<uuid>/pipe/control` does not fit in a unix socket address.
pub fn check_socket_path(mps_root: &Path, uuid: &str) -> Result<(), ConfigError> {
    let sock = crate::layout::GpuLayout::new(mps_root, uuid).control_socket();
    let len = sock.as_os_str().len();
    if len > MAX_SOCKET_PATH {
        return Err(ConfigError::invalid(
            "mpsDaemon.mpsRoot",
            format!(
                "control socket path {} is {len} bytes, over the {MAX_SOCKET_PATH}-byte unix socket limit; use a shorter mpsRoot",
                sock.display()
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
