//! Reading the plan's node-independent settings ([`crate::settings`]) from a config file: each
//! bad value is an error naming its key.

use std::path::PathBuf;
use std::time::Duration;

use crate::config::{ConfigError, ConfigFile, DurationValue};
use crate::settings::{
    CdiSettings, EnforceSettings, Overrides, Share, Timing, DEFAULT_CDI_SPEC_DIR,
    DEFAULT_CONTAINER_PIPE_DIRECTORY, DEFAULT_GPUHOOK_PATH, MAX_SHARE_NAME,
};

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

/// `mpsDaemon.maxClientsPerContainer`, `procRoot`, `cgroupRoot`, `criSocket`.
pub fn resolve_enforce(cfg: &ConfigFile) -> Result<EnforceSettings, ConfigError> {
    let d = &cfg.mps_daemon;
    let max = match d.max_clients_per_container {
        None => None,
        Some(n) if (1..=1000).contains(&n) => u32::try_from(n).ok(),
        Some(n) => {
            return Err(ConfigError::invalid(
                "mpsDaemon.maxClientsPerContainer",
                format!("must be between 1 and 1000, got {n}; leave it out for no cap"),
            ))
        }
    };
    let cri_socket = match &d.cri_socket {
        Some(p) if !p.is_absolute() => {
            return Err(ConfigError::invalid(
                "mpsDaemon.criSocket",
                format!("{} must be an absolute path", p.display()),
            ))
        }
        other => other.clone(),
    };
    Ok(EnforceSettings {
        cri_socket,
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
    use crate::settings::share_limits;

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

    #[test]
    fn cri_socket_is_off_by_default_and_must_be_absolute() {
        let enforce = |extra: &str| {
            resolve_enforce(&parse(&format!("version: v1\nmpsDaemon:\n{extra}")).unwrap())
        };
        assert_eq!(
            enforce("  maxClientsPerContainer: 2\n").unwrap().cri_socket,
            None
        );
        let s = enforce("  criSocket: /run/containerd/containerd.sock\n").unwrap();
        assert_eq!(
            s.cri_socket.as_deref(),
            Some(std::path::Path::new("/run/containerd/containerd.sock"))
        );
        let e = enforce("  criSocket: containerd.sock\n")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("mpsDaemon.criSocket:"), "{e}");
    }
}
