//! Where the daemon lives: pipe and log directories from the same environment variables the
//! real `nvidia-cuda-mps-control` reads, plus the fault-injection setting of the simulator.

use std::path::{Path, PathBuf};

pub use crate::error::ConfigError;

/// Default pipe directory of the real daemon.
pub const DEFAULT_PIPE_DIR: &str = "/tmp/nvidia-mps";
/// Default log directory of the real daemon.
pub const DEFAULT_LOG_DIR: &str = "/var/log/nvidia-mps";
/// `sun_path` is 108 bytes including the terminating NUL.
pub const MAX_SOCKET_PATH: usize = 107;

/// Resolved locations of one control daemon instance.
#[derive(Debug, Clone)]
pub struct Paths {
    pub pipe_dir: PathBuf,
    pub log_dir: PathBuf,
}

impl Paths {
    /// Reads `CUDA_MPS_PIPE_DIRECTORY` / `CUDA_MPS_LOG_DIRECTORY` (empty means default).
    pub fn from_env() -> Self {
        let get = |k: &str, d: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(d))
        };
        Paths {
            pipe_dir: get("CUDA_MPS_PIPE_DIRECTORY", DEFAULT_PIPE_DIR),
            log_dir: get("CUDA_MPS_LOG_DIRECTORY", DEFAULT_LOG_DIR),
        }
    }

    pub fn socket(&self) -> PathBuf {
        self.pipe_dir.join("control")
    }

    pub fn pid_file(&self) -> PathBuf {
        self.pipe_dir.join("nvidia-cuda-mps-control.pid")
    }

    pub fn lock_file(&self) -> PathBuf {
        self.pipe_dir.join("control_lock")
    }

    pub fn control_log(&self) -> PathBuf {
        self.log_dir.join("control.log")
    }

    pub fn server_log(&self) -> PathBuf {
        self.log_dir.join("server.log")
    }

    /// Fails with a clear message when the socket path cannot fit in `sun_path`.
    pub fn check_socket_len(&self) -> Result<(), ConfigError> {
        check_socket_path(&self.socket())
    }
}

/// Unix socket paths must stay under 108 bytes.
pub fn check_socket_path(p: &Path) -> Result<(), ConfigError> {
    let len = p.as_os_str().len();
    if len > MAX_SOCKET_PATH {
        return Err(ConfigError::SocketPath {
            path: p.to_path_buf(),
            len,
            max: MAX_SOCKET_PATH,
        });
    }
    Ok(())
}

/// Simulation-only fault injection from `GPUHOOK_SIM_MPS_FAULT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fault {
    #[default]
    None,
    /// Answer N UI commands, then accept connections but never answer again.
    WedgeAfter(u64),
    /// Answer N UI commands, then exit abruptly (socket and pid file left behind).
    CrashAfter(u64),
    /// Accept pinned memory limits given by UUID but never apply them (a bug some drivers
    /// had; a careful caller sets limits by device index).
    IgnoreUuidLimits,
    /// Ignore CUDA_MPS_ACTIVE_THREAD_PERCENTAGE / CUDA_MPS_PINNED_DEVICE_MEM_LIMIT in the
    /// daemon's environment (a driver without that feature): defaults start at 100 / none.
    IgnoreEnvLimits,
}

impl Fault {
    pub fn parse(v: Option<&str>) -> Result<Self, ConfigError> {
        let Some(v) = v.map(str::trim).filter(|v| !v.is_empty()) else {
            return Ok(Fault::None);
        };
        let bad = || ConfigError::Fault(v.to_string());
        if v == "ignore-uuid-limits" {
            return Ok(Fault::IgnoreUuidLimits);
        }
        if v == "ignore-env-limits" {
            return Ok(Fault::IgnoreEnvLimits);
        }
        let (kind, n) = v.split_once(':').ok_or_else(bad)?;
        let n: u64 = n.parse().map_err(|_| bad())?;
        match kind {
            "wedge-after" => Ok(Fault::WedgeAfter(n)),
            "crash-after" => Ok(Fault::CrashAfter(n)),
            _ => Err(bad()),
        }
    }
}

/// Simulation-only: a gate file holding a daemon's start; see [`hold`].
pub const HOLD_ENV: &str = "GPUHOOK_SIM_MPS_HOLD";
/// Simulation-only: a gate file holding client-mode commands; see [`hold`].
pub const HOLD_COMMANDS_ENV: &str = "GPUHOOK_SIM_MPS_HOLD_COMMANDS";

/// Simulation-only (`GPUHOOK_SIM_MPS_HOLD=<file>`: a control daemon slow to start;
/// `GPUHOOK_SIM_MPS_HOLD_COMMANDS=<file>`: a client-mode command slow to reach its daemon).
/// While the file named by `env` exists, `-d` / `-f` waits before it binds its socket, or
/// client mode before it connects; it creates `<file>.waiting` first, so that a test knows it
/// is being held (a condition, not a delay).
pub fn hold(env: &str) -> std::io::Result<()> {
    let Some(gate) = std::env::var_os(env).filter(|v| !v.is_empty()) else {
        return Ok(());
    };
    let gate = PathBuf::from(gate);
    if !gate.exists() {
        return Ok(());
    }
    let mut waiting = gate.clone().into_os_string();
    waiting.push(".waiting");
    std::fs::write(&waiting, format!("{}\n", std::process::id()))?;
    while gate.exists() {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_socket_path_rejected() {
        let long = format!("/tmp/{}", "x".repeat(100));
        let err = check_socket_path(&Path::new(&long).join("control")).unwrap_err();
        assert!(err.to_string().contains("CUDA_MPS_PIPE_DIRECTORY"), "{err}");
        assert!(check_socket_path(Path::new("/tmp/nvidia-mps/control")).is_ok());
    }

    #[test]
    fn fault_parse() {
        assert_eq!(Fault::parse(None).unwrap(), Fault::None);
        assert_eq!(
            Fault::parse(Some("wedge-after:3")).unwrap(),
            Fault::WedgeAfter(3)
        );
        assert_eq!(
            Fault::parse(Some("crash-after:0")).unwrap(),
            Fault::CrashAfter(0)
        );
        assert_eq!(
            Fault::parse(Some("ignore-uuid-limits")).unwrap(),
            Fault::IgnoreUuidLimits
        );
        assert!(Fault::parse(Some("boom")).is_err());
    }
}
