//! The parts of a plan that are not per-resource: supervision timing, fractional shares, the
//! CDI spec settings and client enforcement.
//!
//! Shares exist because one MPS GPU often hosts containers of different sizes (a quarter for a
//! notebook, a half for a training job). A share is a named fraction of a GPU; its CDI device gives
//! the container client-side limits (`CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`,
//! `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`) scaled to the fraction. MPS clients can only *lower* the
//! limits of their server, so the server's limits must be the largest share's: see
//! [`share_limits`].
//!
//! Only the values live here; [`crate::plan_settings`] reads them from a config file, so that
//! the config parser (which uses [`parse_fraction`]) and these types do not import each other.

use std::path::PathBuf;
use std::time::Duration;

/// Default directory of our CDI spec (runtimes read `/etc/cdi` and `/var/run/cdi`).
pub const DEFAULT_CDI_SPEC_DIR: &str = "/var/run/cdi";
/// Default host path of the gpuhook binary run by the spec's hooks.
pub const DEFAULT_GPUHOOK_PATH: &str = "/usr/bin/gpuhook";
/// Default container path of the pipe directory: CUDA's own default for
/// `CUDA_MPS_PIPE_DIRECTORY`, so even a client that drops the variable finds the daemon.
pub const DEFAULT_CONTAINER_PIPE_DIRECTORY: &str = "/tmp/nvidia-mps";
/// Longest share name: `<uuid>-<name>` (40 + 1 + 22) must stay within CDI's 63 characters.
pub const MAX_SHARE_NAME: usize = 22;

/// Supervision timing, changeable by a reload without restarting daemons.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    pub probe_interval: Duration,
    pub command_timeout: Duration,
    pub start_timeout: Duration,
    pub shutdown_timeout: Duration,
    pub max_restart_backoff: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            probe_interval: Duration::from_secs(5),
            command_timeout: Duration::from_secs(5),
            start_timeout: Duration::from_secs(10),
            shutdown_timeout: Duration::from_secs(10),
            max_restart_backoff: Duration::from_secs(30),
        }
    }
}

/// Command-line values that win over the file.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub mps_root: Option<PathBuf>,
    pub driver_root: Option<PathBuf>,
    pub control_binary: Option<PathBuf>,
    pub probe_interval: Option<Duration>,
    pub cdi_spec_dir: Option<PathBuf>,
    pub gpuhook_path: Option<PathBuf>,
}

/// A named fraction of a GPU, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Share {
    pub name: String,
    pub num: u64,
    pub den: u64,
}

/// The client limits of one share of one GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareLimits {
    /// `None` for the default share (1/replicas, after `mpsDaemon.gpus` overrides).
    pub name: Option<String>,
    pub active_thread_percentage: u32,
    pub pinned_memory_limit_mib: Option<u64>,
}

/// How the CDI spec is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CdiSettings {
    pub spec_dir: PathBuf,
    pub gpuhook_path: PathBuf,
    pub container_pipe_directory: PathBuf,
    /// Replaces the inventory's driver and dev roots in the spec's host paths.
    pub host_driver_root: Option<PathBuf>,
}

/// How clients are watched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnforceSettings {
    /// `mpsDaemon.criSocket` (absolute), used when `--cri-socket` is not given.
    pub cri_socket: Option<PathBuf>,
    pub max_clients_per_container: Option<u32>,
    pub proc_root: PathBuf,
    pub cgroup_root: PathBuf,
}

/// Parses `1/4`, `0.25`, `25%`, `1` into a reduced positive (numerator, denominator).
pub fn parse_fraction(s: &str) -> Option<(u64, u64)> {
    let s = s.trim();
    let (num, den) = if let Some((n, d)) = s.split_once('/') {
        (n.trim().parse::<u64>().ok()?, d.trim().parse::<u64>().ok()?)
    } else {
        let (text, scale) = match s.strip_suffix('%') {
            Some(p) => (p.trim(), 100u64),
            None => (s, 1u64),
        };
        let (int, frac) = text.split_once('.').unwrap_or((text, ""));
        if int.is_empty() && frac.is_empty()
            || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit())
            || frac.len() > 6
        {
            return None;
        }
        let den = 10u64.pow(u32::try_from(frac.len()).ok()?);
        let num = format!("{int}{frac}").parse::<u64>().ok()?;
        (num, den.checked_mul(scale)?)
    };
    if num == 0 || den == 0 {
        return None;
    }
    let g = gcd(num, den);
    Some((num / g, den / g))
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// The default share followed by every named share of a GPU with `memory_mib` of memory (0:
/// unknown, no memory limits). Thread percentage `floor(100 * fraction)` (at least 1), memory
/// `floor(memory * fraction)` MiB.
pub fn share_limits(
    default_pct: u32,
    default_mem: Option<u64>,
    memory_mib: u64,
    shares: &[Share],
) -> Vec<ShareLimits> {
    let mut out = vec![ShareLimits {
        name: None,
        active_thread_percentage: default_pct,
        pinned_memory_limit_mib: default_mem,
    }];
    for s in shares {
        // A share is at most one GPU (num <= den), so the scaled value fits where `v` did.
        let scale = |v: u64| {
            u64::try_from(u128::from(v) * u128::from(s.num) / u128::from(s.den)).unwrap_or(v)
        };
        out.push(ShareLimits {
            name: Some(s.name.clone()),
            active_thread_percentage: u32::try_from(scale(100)).unwrap_or(100).max(1),
            pinned_memory_limit_mib: (memory_mib > 0).then(|| scale(memory_mib).max(1)),
        });
    }
    out
}
