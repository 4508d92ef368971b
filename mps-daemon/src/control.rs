//! Talking to `nvidia-cuda-mps-control`: starting the daemon (`-d`) and sending commands.
//!
//! A command is sent the way NVIDIA documents it: run the control binary with no arguments and the
//! daemon's environment, write the command on stdin, read the reply on stdout (exit status 1: no
//! daemon). Every call is bounded: the k8s-device-plugin's health check had no timeout, so one
//! wedged daemon hung it forever. On expiry the client process is killed.
//!
//! The environment is built from scratch (`env_clear`): only the GPU's UUID, the pipe and log
//! directories and a minimal PATH reach the daemon, never our own environment (no LD_PRELOAD).

use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;
use tokio::time::Instant;

use crate::layout::GpuLayout;
use crate::plan::GpuPlan;
use gpuhook_node::bounded::preview;

/// Largest control reply we accept (server and client lists are a few pids; 48 clients).
pub const MAX_REPLY: usize = 64 * 1024;

/// Errors of the control binary.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ControlError {
    #[error("cannot run {binary}: {message}; check mpsDaemon.driverRoot / controlBinary")]
    Spawn { binary: PathBuf, message: String },
    #[error("`{command}` got no reply within {timeout:?} (control daemon wedged?)")]
    Timeout { command: String, timeout: Duration },
    #[error("`{command}`: no control daemon answers ({output})")]
    NoDaemon { command: String, output: String },
    #[error("`{command}` failed with exit status {code:?}: {output}")]
    Failed {
        command: String,
        code: Option<i32>,
        output: String,
    },
    #[error(
        "the control daemon (`nvidia-cuda-mps-control -f`) exited with status {code:?}: {output}"
    )]
    StartFailed { code: Option<i32>, output: String },
    #[error("control daemon did not come up within {timeout:?}: {what}")]
    StartTimeout { timeout: Duration, what: String },
    #[error("{0}")]
    Io(String),
}

impl ControlError {
    /// True when the failure is ours (we could not run the client: no fds, no memory, no
    /// processes) and says nothing about the daemon: a probe that fails so must not restart it.
    pub fn is_local(&self) -> bool {
        matches!(self, ControlError::Spawn { .. } | ControlError::Io(_))
    }
}

/// How to run the control binary for one GPU.
#[derive(Debug, Clone)]
pub struct ControlEnv {
    pub binary: PathBuf,
    pub envs: Vec<(String, OsString)>,
    /// Added to `envs` for the daemon only: its default limits.
    pub daemon_envs: Vec<(String, OsString)>,
    /// When set, the daemon gets this directory bind-mounted on `/dev/shm` in a private mount
    /// namespace, so that it shares `/dev/shm` with clients that mount the same directory.
    pub shm: Option<PathBuf>,
    /// Where command durations are recorded (`gpuhook_mps_command_duration_seconds`).
    pub latency: Option<(crate::status::Board, String)>,
}

/// Directories of the driver root that may hold its libraries.
const LIB_DIRS: [&str; 4] = [
    "usr/lib/x86_64-linux-gnu",
    "usr/lib/aarch64-linux-gnu",
    "usr/lib64",
    "usr/lib",
];

impl ControlEnv {
    /// The environment for `plan`'s GPU.
    pub fn new(plan: &GpuPlan, layout: &GpuLayout, shm: Option<PathBuf>) -> Self {
        let root = &plan.driver_root;
        // The driver's own bin directory first (the daemon starts nvidia-cuda-mps-server from it).
        let mut path = OsString::new();
        if root != Path::new("/") {
            path.push(gpuhook_node::join_under(root, Path::new("/usr/bin")));
            path.push(":");
        }
        path.push("/usr/sbin:/usr/bin:/sbin:/bin");
        let mut envs = vec![
            (
                "CUDA_VISIBLE_DEVICES".to_string(),
                OsString::from(&plan.uuid),
            ),
            (
                "CUDA_MPS_PIPE_DIRECTORY".to_string(),
                layout.pipe.clone().into_os_string(),
            ),
            (
                "CUDA_MPS_LOG_DIRECTORY".to_string(),
                layout.log.clone().into_os_string(),
            ),
            ("PATH".to_string(), path),
        ];
        if root != Path::new("/") {
            let dirs: Vec<String> = LIB_DIRS
                .iter()
                .map(|d| root.join(d))
                .filter(|d| d.is_dir())
                .map(|d| d.display().to_string())
                .collect();
            if !dirs.is_empty() {
                envs.push((
                    "LD_LIBRARY_PATH".to_string(),
                    OsString::from(dirs.join(":")),
                ));
            }
        }
        let mut daemon_envs = vec![(
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE".to_string(),
            OsString::from(plan.active_thread_percentage.to_string()),
        )];
        if let Some(m) = plan.pinned_memory_limit_mib {
            daemon_envs.push((
                "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT".to_string(),
                OsString::from(format!("0={m}M")),
            ));
        }
        ControlEnv {
            binary: plan.control_binary.clone(),
            envs,
            daemon_envs,
            shm,
            latency: None,
        }
    }

    /// The client-mode command (no limits in its environment).
    fn command(&self) -> Command {
        let mut cmd = Command::new(&self.binary);
        cmd.env_clear()
            .envs(self.envs.iter().map(|(k, v)| (k, v)))
            .current_dir("/");
        cmd
    }

    pub(crate) fn spawn_err(&self, e: std::io::Error) -> ControlError {
        ControlError::Spawn {
            binary: self.binary.clone(),
            message: e.to_string(),
        }
    }

    /// Sends one command; returns the trimmed reply. Kills the client after `timeout`.
    pub async fn send(&self, command: &str, timeout: Duration) -> Result<String, ControlError> {
        let start = Instant::now();
        let res = self.send_inner(command, timeout).await;
        if let Some((board, uuid)) = &self.latency {
            let word = command.split_whitespace().next().unwrap_or("");
            board.observe_command(uuid, word, start.elapsed().as_secs_f64());
        }
        res
    }

    async fn send_inner(&self, command: &str, timeout: Duration) -> Result<String, ControlError> {
        let mut cmd = self.command();
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().map_err(|e| self.spawn_err(e))?;
        let mut stdin = child.stdin.take();
        let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
        let line = format!("{command}\n");
        let run = async move {
            if let Some(stdin) = stdin.as_mut() {
                // A client with no daemon may exit before reading: EPIPE is not our error.
                let _ = stdin.write_all(line.as_bytes()).await;
            }
            drop(stdin);
            let (out, err) = tokio::join!(read_capped(stdout), read_capped(stderr));
            let (out, err) = (out?, err?);
            if out.len() > MAX_REPLY {
                let _ = child.start_kill();
            }
            let status = child.wait().await?;
            Ok::<_, std::io::Error>((status, out, err))
        };
        // On timeout `run` is dropped with the child in it: kill_on_drop kills and reaps it.
        let (status, out, err) = match tokio::time::timeout(timeout, run).await {
            Err(_) => {
                return Err(ControlError::Timeout {
                    command: command.to_string(),
                    timeout,
                })
            }
            Ok(Err(e)) => return Err(ControlError::Io(format!("`{command}`: {e}"))),
            Ok(Ok(r)) => r,
        };
        if out.len() > MAX_REPLY {
            return Err(ControlError::Failed {
                command: command.to_string(),
                code: None,
                output: format!("reply larger than {MAX_REPLY} bytes"),
            });
        }
        let stdout = String::from_utf8_lossy(&out).trim().to_string();
        if status.success() {
            return Ok(stdout);
        }
        let stderr = String::from_utf8_lossy(&err).trim().to_string();
        let output = [stdout, stderr]
            .into_iter()
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join("; ");
        let output = preview(&output);
        match status.code() {
            Some(1) => Err(ControlError::NoDaemon {
                command: command.to_string(),
                output,
            }),
            code => Err(ControlError::Failed {
                command: command.to_string(),
                code,
                output,
            }),
        }
    }

    /// The command that starts the daemon: the client environment plus the limits
    /// (`CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`, `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`), so that its
    /// defaults are in force from its first moment, and the shared `/dev/shm` when configured.
    pub(crate) fn daemon_command(&self) -> Result<Command, ControlError> {
        let mut cmd = self.command();
        cmd.envs(self.daemon_envs.iter().map(|(k, v)| (k, v)));
        if let Some(shm) = &self.shm {
            let shm = CString::new(shm.as_os_str().as_bytes())
                .map_err(|_| ControlError::Io(format!("bad shm path {}", shm.display())))?;
            // SAFETY: the closure runs between fork and exec; it only calls the async-signal-safe
            // syscalls unshare(2) and mount(2) with C strings prepared before the fork, and reads
            // errno. It allocates nothing and takes no locks.
            unsafe {
                cmd.pre_exec(move || private_dev_shm(&shm));
            }
        }
        Ok(cmd)
    }
}

/// Reads a child's output up to one byte over [`MAX_REPLY`] (so that an overflow is seen).
async fn read_capped<R: tokio::io::AsyncRead + Unpin>(r: Option<R>) -> std::io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    if let Some(r) = r {
        let cap = u64::try_from(MAX_REPLY).unwrap_or(u64::MAX) + 1;
        r.take(cap).read_to_end(&mut buf).await?;
    }
    Ok(buf)
}

/// In the forked child: a private mount namespace where `/dev/shm` is the shared tmpfs.
fn private_dev_shm(shm: &CString) -> std::io::Result<()> {
    const ROOT: &[u8] = b"/\0";
    const DEV_SHM: &[u8] = b"/dev/shm\0";
    // SAFETY: unshare takes a flag only.
    if unsafe { libc::unshare(libc::CLONE_NEWNS) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: NUL-terminated static strings and null pointers where mount(2) allows them.
    let rc = unsafe {
        libc::mount(
            std::ptr::null(),
            ROOT.as_ptr().cast(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_SLAVE,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `shm` is a valid C string owned by the caller; the others are static.
    let rc = unsafe {
        libc::mount(
            shm.as_ptr(),
            DEV_SHM.as_ptr().cast(),
            std::ptr::null(),
            libc::MS_BIND,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Parses a thread percentage reply (`25.0`, `25`).
/// `None` for anything but a finite number: `nan` would pass every `(got - want).abs() > 0.5`
/// read-back check, so a control socket answering it must count as not answering.
pub fn parse_percentage(reply: &str) -> Option<f64> {
    reply
        .split_whitespace()
        .last()?
        .parse::<f64>()
        .ok()
        .filter(|p| p.is_finite())
}

/// Parses a pinned memory limit reply into MiB: `4096M`, `2G`, `0=4096M`, `4096 MB`, `4294967296`
/// (bytes when unit-less and large, MiB otherwise).
pub fn parse_mem_limit_mib(reply: &str) -> Option<u64> {
    let mut s = reply.trim().to_string();
    if let Some((_, v)) = s.rsplit_once('=') {
        s = v.trim().to_string();
    }
    let s = s.replace(' ', "");
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num.parse().ok()?;
    let mib = match unit.trim_end_matches('B').trim_end_matches('i') {
        "" if n >= (1u64 << 20) as f64 => n / (1u64 << 20) as f64,
        "" | "M" | "m" => n,
        "K" | "k" => n / 1024.0,
        "G" | "g" => n * 1024.0,
        "T" | "t" => n * 1024.0 * 1024.0,
        _ => return None,
    };
    // `n` is digits and dots, so never negative; `as` saturates a value past `u64::MAX`, which
    // no driver reports (and which then fails the read-back check, as it should).
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let mib = mib.round() as u64;
    Some(mib)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_replies() {
        assert_eq!(parse_percentage("25.0"), Some(25.0));
        assert_eq!(parse_percentage("x"), None);
        // nan would pass the read-back check `(got - want).abs() > 0.5`; inf is no percentage.
        assert_eq!(parse_percentage("nan"), None);
        assert_eq!(parse_percentage("1e999"), None);
        assert_eq!(parse_percentage("-inf"), None);
        assert_eq!(parse_mem_limit_mib("4096M"), Some(4096));
        assert_eq!(parse_mem_limit_mib("2G"), Some(2048));
        assert_eq!(parse_mem_limit_mib("0=20000M"), Some(20000));
        assert_eq!(parse_mem_limit_mib("20000 MB"), Some(20000));
        assert_eq!(parse_mem_limit_mib("4294967296"), Some(4096));
        assert_eq!(parse_mem_limit_mib("lots"), None);
    }
}
