//! The parts of a plan that are not per-resource: supervision timing, fractional shares, the
//! CDI spec settings and client enforcement.
//!
//! Shares exist because one MPS GPU often hosts containers of different sizes (a quarter for a
//! notebook, a half for a training job). A share is a named fraction of a GPU; its CDI device gives
//! the container client-side limits (`CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`,
//! `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`) scaled to the fraction. MPS clients can only *lower* the
//! limits of their server, so the server's limits must be the largest share's: see
//! [`share_limits`].

use std::path::PathBuf;
use std::time::Duration;

use crate::config::{ConfigError, ConfigFile, DurationValue};
use crate::plan::{Overrides, Timing};

/// Default directory of our CDI spec (runtimes read `/etc/cdi` and `/var/run/cdi`).
pub const DEFAULT_CDI_SPEC_DIR: &str = "/var/run/cdi";
/// Default host path of the gpuhook binary run by the spec's hooks.
pub const DEFAULT_GPUHOOK_PATH: &str = "/usr/bin/gpuhook";
/// Default container path of the pipe directory: CUDA's own default for
/// `CUDA_MPS_PIPE_DIRECTORY`, so even a client that drops the variable finds the daemon.
pub const DEFAULT_CONTAINER_PIPE_DIRECTORY: &str = "/tmp/nvidia-mps";
/// Longest share name: `<uuid>-<name>` (40 + 1 + 22) must stay within CDI's 63 characters.
pub const MAX_SHARE_NAME: usize = 22;

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
    pub max_clients_per_container: Option<u32>,
    pub proc_root: PathBuf,
    pub cgroup_root: PathBuf,
}

pub(crate) fn resolve_timing(cfg: &ConfigFile, ov: &Overrides) -> Result<Timing, ConfigError> {
    let d = &cfg.mps_daemon;
    let def = Timing::default();
    let pick = |v: Option<DurationValue>, dflt: Duration, key: &str| {
        let v = v.map(|v| v.0).unwrap_or(dflt);
        if v.is_zero() {
            Err(ConfigError::invalid(
                format!("mpsDaemon.{key}"),
                "must be greater than 0",
            ))
        } else {
            Ok(v)
        }
    };
    Ok(Timing {
        probe_interval: match ov.probe_interval {
            Some(p) if !p.is_zero() => p,
            _ => pick(d.probe_interval, def.probe_interval, "probeInterval")?,
        },
        command_timeout: pick(d.command_timeout, def.command_timeout, "commandTimeout")?,
        start_timeout: pick(d.start_timeout, def.start_timeout, "startTimeout")?,
        shutdown_timeout: pick(d.shutdown_timeout, def.shutdown_timeout, "shutdownTimeout")?,
        max_restart_backoff: pick(
            d.max_restart_backoff,
            def.max_restart_backoff,
            "maxRestartBackoff",
        )?,
    })
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
        let den = 10u64.pow(frac.len() as u32);
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

fn valid_share_name(n: &str) -> bool {
    let b = n.as_bytes();
    !b.is_empty()
        && b.first().is_some_and(u8::is_ascii_alphanumeric)
        && b.last().is_some_and(u8::is_ascii_alphanumeric)
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'))
}

/// Checks `mpsDaemon.shares`: names usable in CDI device names and unique, each fraction at
/// most one GPU, and all of them together fitting in one GPU (so that one container of every
/// share can run on a GPU at the same time, each at its full size).
pub fn resolve_shares(cfg: &ConfigFile) -> Result<Vec<Share>, ConfigError> {
    let mut out: Vec<Share> = Vec::new();
    // Exact sum of the fractions as num/den (u128: no overflow for reduced u64 parts of sane size).
    let (mut sum_n, mut sum_d) = (0u128, 1u128);
    for (i, s) in cfg.mps_daemon.shares.iter().enumerate() {
        let key = format!("mpsDaemon.shares[{i}]");
        if !valid_share_name(&s.name) || s.name.len() > MAX_SHARE_NAME {
            return Err(ConfigError::invalid(
                format!("{key}.name"),
                format!(
                    "{:?} cannot be part of a CDI device name; use 1 to {MAX_SHARE_NAME} letters, digits, `_`, `.` or `-`, starting and ending with a letter or digit (e.g. `quarter`)",
                    s.name
                ),
            ));
        }
        if let Some(j) = out.iter().position(|o| o.name == s.name) {
            return Err(ConfigError::invalid(
                format!("{key}.name"),
                format!(
                    "duplicate share name {:?} (also mpsDaemon.shares[{j}]); give each share its own name",
                    s.name
                ),
            ));
        }
        let (num, den) = (s.fraction.num, s.fraction.den);
        if num > den {
            return Err(ConfigError::invalid(
                format!("{key}.fraction"),
                format!("{num}/{den} is more than a whole GPU; a share is at most `1`"),
            ));
        }
        sum_n = sum_n * u128::from(den) + u128::from(num) * sum_d;
        sum_d *= u128::from(den);
        out.push(Share {
            name: s.name.clone(),
            num,
            den,
        });
    }
    if sum_n > sum_d {
        let list: Vec<String> = out
            .iter()
            .map(|s| format!("{}={}/{}", s.name, s.num, s.den))
            .collect();
        return Err(ConfigError::invalid(
            "mpsDaemon.shares",
            format!(
                "the shares ({}) add up to more than one GPU; they must fit in one GPU together (sum at most 1): make them smaller or remove one",
                list.join(", ")
            ),
        ));
    }
    Ok(out)
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
        let scale = |v: u64| (u128::from(v) * u128::from(s.num) / u128::from(s.den)) as u64;
        out.push(ShareLimits {
            name: Some(s.name.clone()),
            active_thread_percentage: (scale(100) as u32).max(1),
            pinned_memory_limit_mib: (memory_mib > 0).then(|| scale(memory_mib).max(1)),
        });
    }
    out
}

/// `mpsDaemon.cdiSpecDir`, `gpuhookPath`, `containerPipeDirectory`.
pub fn resolve_cdi(cfg: &ConfigFile, ov: &Overrides) -> Result<CdiSettings, ConfigError> {
    let d = &cfg.mps_daemon;
    let abs = |p: PathBuf, key: &str| {
        if p.is_absolute() {
            Ok(p)
        } else {
            Err(ConfigError::invalid(
                format!("mpsDaemon.{key}"),
                format!("{} must be an absolute path", p.display()),
            ))
        }
    };
    Ok(CdiSettings {
        spec_dir: abs(
            ov.cdi_spec_dir
                .clone()
                .or_else(|| d.cdi_spec_dir.clone())
                .unwrap_or_else(|| DEFAULT_CDI_SPEC_DIR.into()),
            "cdiSpecDir",
        )?,
        gpuhook_path: abs(
            ov.gpuhook_path
                .clone()
                .or_else(|| d.gpuhook_path.clone())
                .unwrap_or_else(|| DEFAULT_GPUHOOK_PATH.into()),
            "gpuhookPath",
        )?,
        container_pipe_directory: abs(
            d.container_pipe_directory
                .clone()
                .unwrap_or_else(|| DEFAULT_CONTAINER_PIPE_DIRECTORY.into()),
            "containerPipeDirectory",
        )?,
        host_driver_root: d
            .host_driver_root
            .clone()
            .map(|p| abs(p, "hostDriverRoot"))
            .transpose()?,
    })
}

/// `mpsDaemon.maxClientsPerContainer`, `procRoot`, `cgroupRoot`.
pub fn resolve_enforce(cfg: &ConfigFile) -> Result<EnforceSettings, ConfigError> {
    let d = &cfg.mps_daemon;
    let max = match d.max_clients_per_container {
        None => None,
        Some(n) if (1..=1000).contains(&n) => Some(n as u32),
        Some(n) => {
            return Err(ConfigError::invalid(
                "mpsDaemon.maxClientsPerContainer",
                format!("must be between 1 and 1000, got {n}; leave it out for no cap"),
            ))
        }
    };
    Ok(EnforceSettings {
        max_clients_per_container: max,
        proc_root: d.proc_root.clone().unwrap_or_else(|| "/proc".into()),
        cgroup_root: d
            .cgroup_root
            .clone()
            .unwrap_or_else(|| "/sys/fs/cgroup".into()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse;

    fn shares(yaml: &str) -> Result<Vec<Share>, ConfigError> {
        resolve_shares(&parse(&format!("version: v1\nmpsDaemon:\n  shares: {yaml}\n")).unwrap())
    }

    #[test]
    fn quarter_and_half_scale_threads_and_memory() {
        let s = shares("[{name: quarter, fraction: 1/4}, {name: half, fraction: '50%'}]").unwrap();
        assert_eq!((s[1].num, s[1].den), (1, 2));
        let l = share_limits(25, Some(20000), 81559, &s);
        assert_eq!(l[0].name, None);
        assert_eq!(
            (l[1].active_thread_percentage, l[1].pinned_memory_limit_mib),
            (25, Some(20389))
        );
        assert_eq!(
            (l[2].active_thread_percentage, l[2].pinned_memory_limit_mib),
            (50, Some(40779))
        );
        assert_eq!(
            share_limits(25, None, 0, &s)[2].pinned_memory_limit_mib,
            None
        );
    }

    #[test]
    fn bad_shares_name_the_key() {
        let e = shares("[{name: big, fraction: 5/4}]")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("mpsDaemon.shares[0].fraction:") && e.contains("at most `1`"),
            "{e}"
        );
        let e = shares("[{name: a, fraction: 3/4}, {name: b, fraction: 0.5}]")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("mpsDaemon.shares:") && e.contains("a=3/4, b=1/2"),
            "{e}"
        );
        let e = shares("[{name: a/b, fraction: 1/4}]")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("mpsDaemon.shares[0].name:"), "{e}");
        let e = shares("[{name: a, fraction: 1/4}, {name: a, fraction: 1/8}]")
            .unwrap_err()
            .to_string();
        assert!(e.contains("duplicate share name"), "{e}");
        let e = parse("version: v1\nmpsDaemon:\n  shares: [{name: a, fraction: 0/4}]\n")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("mpsDaemon.shares[0].fraction:"), "{e}");
        assert!(shares("[{name: a, fraction: 1/2}, {name: b, fraction: 1/2}]").is_ok());
    }
}
