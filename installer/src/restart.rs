//! Making the container engine pick up the runtime `install` registered (and `uninstall`
//! removed), only when its config really changed.
//!
//! containerd reads its config only at start, so a runtime class is unusable until it
//! restarts. The modes are those of NVIDIA's toolkit container (`--restart-mode`,
//! `RUNTIME_RESTART_MODE`; `Options.Restart` in `cmd/nvidia-ctk-installer/container/
//! container.go`), with containerd's default `signal` (`DefaultRestartMode` in
//! `.../runtime/containerd/containerd.go`):
//! - `signal`: SIGHUP to the engine.
//!   - containerd: the process serving containerd's socket (NVIDIA's `SignalContainerd` finds
//!     it from the socket's peer credentials, as here). containerd does not handle SIGHUP, so it
//!     exits and its service manager (`Restart=always`) starts it again on the new config.
//!   - dockerd: the pid in its pidfile (`--pidfile`, default `/var/run/docker.pid`), not the
//!     socket's peer: `docker.socket` is socket-activated, so the listener's credentials are
//!     systemd's (pid 1). dockerd reloads `runtimes` and `default-runtime` from `daemon.json` on
//!     SIGHUP without restarting (Docker's dockerd reference, "Configuration reload behavior").
//!     But its reload replaces the runtimes only when the file *has* a `runtimes` key (moby
//!     `daemon/reload_unix.go` `reloadPlatform`: `if conf.IsValueSet("runtimes")`), so after an
//!     uninstall that restores a file without one, dockerd keeps `gpuhook` until restarted
//!     (said so on stdout).
//!   - CRI-O: the process serving its socket (`/var/run/crio/crio.sock`); CRI-O reloads its
//!     runtime handlers on SIGHUP (crio.conf(5), CRIO.RUNTIME.RUNTIMES TABLE: "This option
//!     supports live configuration reload"; older CRI-O without that: use `systemd`).
//!
//!   The pid is checked against `/proc/PID/comm` (when the host root has a /proc), so a stale
//!   pidfile never gets another process signalled.
//! - `systemd`: `systemctl restart containerd|docker|crio`, run in the host root (NVIDIA:
//!   `chroot /host systemctl restart containerd`; this process is already chrooted there), with
//!   `SYSTEMD_IGNORE_CHROOT=1`, without which systemctl ignores the request in a chroot.
//! - `none`: nothing, and the command to run is printed.
//!
//! Unlike NVIDIA, which restarts on every run, this restarts only when the engine's config
//! really changed (`runtime configure` says so by its exit status), so re-running the
//! installer on a configured node disturbs nothing.

use std::io::Read as _;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Args, ValueEnum};
use serde::{Deserialize, Serialize};

/// Tries to reach containerd's socket, one second apart (it may be restarting itself).
const SIGNAL_ATTEMPTS: u32 = 3;

/// The container engine `install` registers gpuhook-runtime with (NVIDIA's toolkit container:
/// `--runtime`, `RUNTIME`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Runtime {
    Containerd,
    Docker,
    Crio,
}

impl Runtime {
    /// The engine's name in messages.
    pub fn name(self) -> &'static str {
        match self {
            Runtime::Containerd => "containerd",
            Runtime::Docker => "dockerd",
            Runtime::Crio => "CRI-O",
        }
    }

    /// Its systemd unit.
    fn unit(self) -> &'static str {
        match self {
            Runtime::Containerd => "containerd",
            Runtime::Docker => "docker",
            Runtime::Crio => "crio",
        }
    }

    /// The command `--restart-mode none` tells the admin to run on the host.
    pub fn restart_command(self) -> String {
        format!("systemctl restart {}", self.unit())
    }
}

/// How the engine is made to reload its config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RestartMode {
    // (No doc comments: clap would print them per value, in a long help for every flag.)
    Signal,
    Systemd,
    None,
}

/// The restart flags of `install` and `uninstall`.
#[derive(Debug, Clone, Args)]
pub struct RestartArgs {
    /// How to make the engine load its changed config (only when it changed): signal = SIGHUP
    /// to containerd (it exits, its service restarts it), dockerd or CRI-O (they reload),
    /// systemd = `systemctl restart containerd|docker|crio` in the host root, none = print the
    /// command to run
    #[arg(
        long,
        value_enum,
        value_name = "MODE",
        default_value = "signal",
        env = "RUNTIME_RESTART_MODE"
    )]
    pub restart_mode: RestartMode,
    /// containerd's socket on the host (`--restart-mode signal` signals the process serving it)
    #[arg(
        long,
        value_name = "SOCKET",
        default_value = "/run/containerd/containerd.sock",
        env = "CONTAINERD_SOCKET"
    )]
    pub containerd_socket: PathBuf,
    /// dockerd's pidfile on the host (`--restart-mode signal` with `--runtime docker`)
    #[arg(long, value_name = "FILE", default_value = "/var/run/docker.pid")]
    pub docker_pidfile: PathBuf,
    /// CRI-O's socket on the host (`--restart-mode signal` with `--runtime crio`)
    #[arg(long, value_name = "SOCKET", default_value = "/var/run/crio/crio.sock")]
    pub crio_socket: PathBuf,
}

/// Makes `runtime` load its config as `args` say. Call inside the host root.
pub fn restart(args: &RestartArgs, runtime: Runtime, path_env: &str) -> anyhow::Result<()> {
    let command = runtime.restart_command();
    let name = runtime.name();
    match args.restart_mode {
        RestartMode::None => {
            tracing::warn!(engine = name, "not restarting (--restart-mode none)");
            println!(
                "{name}'s config changed and {name} was not restarted (--restart-mode none): \
                 run `{command}` on the host"
            );
            Ok(())
        }
        RestartMode::Systemd => systemd_restart(runtime, path_env),
        RestartMode::Signal => {
            let pid = match runtime {
                Runtime::Containerd => socket_pid(&args.containerd_socket),
                Runtime::Docker => pidfile_pid(&args.docker_pidfile),
                Runtime::Crio => socket_pid(&args.crio_socket),
            }
            .with_context(|| {
                format!(
                    "cannot signal {name} (is it running? use --restart-mode systemd or none, \
                     and run `{command}`)"
                )
            })?;
            check_comm(pid, runtime)?;
            tracing::info!(pid = pid.as_raw(), engine = name, "sending SIGHUP");
            nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP)
                .with_context(|| format!("cannot send SIGHUP to {name} (pid {pid})"))
        }
    }
}

fn systemd_restart(runtime: Runtime, path_env: &str) -> anyhow::Result<()> {
    let mut cmd = Command::new("systemctl");
    // systemctl ignores `restart` (exit 0, nothing done) when it thinks it runs in a chroot:
    // here it does, and pid 1 of this pid namespace has another root unless the pod has
    // hostPID. The variable (systemd's docs/ENVIRONMENT.md) makes it talk to the host's
    // systemd through /run/systemd anyway.
    cmd.args(["restart", runtime.unit()])
        .env_clear()
        .env("PATH", path_env)
        .env("SYSTEMD_IGNORE_CHROOT", "1");
    tracing::info!(command = ?cmd, engine = runtime.name(), "restarting");
    let status = cmd
        .status()
        .context("cannot run systemctl in the host root (use --restart-mode signal or none)")?;
    if !status.success() {
        bail!("`{}` failed ({status})", runtime.restart_command());
    }
    Ok(())
}

/// The pid serving `socket`, retried one second apart (the engine may be restarting itself).
fn socket_pid(socket: &Path) -> anyhow::Result<nix::unistd::Pid> {
    let mut attempt = 1;
    loop {
        match peer_pid(socket) {
            Ok(pid) => return Ok(pid),
            Err(e) if attempt >= SIGNAL_ATTEMPTS => return Err(e),
            Err(e) => {
                tracing::warn!(attempt, error = %format!("{e:#}"), "cannot reach the engine");
                std::thread::sleep(Duration::from_secs(1));
                attempt += 1;
            }
        }
    }
}

/// The pid in dockerd's pidfile.
fn pidfile_pid(pidfile: &Path) -> anyhow::Result<nix::unistd::Pid> {
    let mut text = String::new();
    std::fs::File::open(pidfile)
        .and_then(|f| f.take(64).read_to_string(&mut text))
        .with_context(|| format!("cannot read {}", pidfile.display()))?;
    let pid: i32 = text
        .trim()
        .parse()
        .ok()
        .filter(|p| *p > 1)
        .with_context(|| {
            format!(
                "{} holds {:?}, not the pid of dockerd",
                pidfile.display(),
                text.trim()
            )
        })?;
    Ok(nix::unistd::Pid::from_raw(pid))
}

/// Refuses to signal `pid` unless it runs the engine's binary (`/proc/PID/comm`): a stale
/// pidfile, or a socket served by something else, must not get another process signalled.
/// Without a /proc in the host root (not mounted there), says so and trusts the pid.
fn check_comm(pid: nix::unistd::Pid, runtime: Runtime) -> anyhow::Result<()> {
    let expected = match runtime {
        Runtime::Containerd => "containerd",
        Runtime::Docker => "dockerd",
        Runtime::Crio => "crio",
    };
    match std::fs::read_to_string(format!("/proc/{pid}/comm")) {
        Ok(comm) if comm.trim_end() == expected => Ok(()),
        Ok(comm) => bail!(
            "pid {pid} is {:?}, not {expected}: not signalled (a stale pidfile, or another \
             process serving the socket?); use --restart-mode systemd or none",
            comm.trim_end()
        ),
        Err(_) if !Path::new("/proc/self").exists() => {
            tracing::warn!(
                pid = pid.as_raw(),
                "no /proc in the host root: pid not checked"
            );
            Ok(())
        }
        Err(e) => Err(e)
            .with_context(|| format!("no process {pid} (stale pidfile? is {expected} running?)")),
    }
}

/// The pid of the process serving `socket`, from the connection's peer credentials.
fn peer_pid(socket: &Path) -> anyhow::Result<nix::unistd::Pid> {
    let stream = UnixStream::connect(socket)
        .with_context(|| format!("cannot connect to {}", socket.display()))?;
    let cred = nix::sys::socket::getsockopt(&stream, nix::sys::socket::sockopt::PeerCredentials)
        .with_context(|| format!("cannot read the peer of {}", socket.display()))?;
    let pid = cred.pid();
    if pid == 1 {
        bail!(
            "{} is served by pid 1 (socket activation): its engine's pid is not known; use \
             --restart-mode systemd",
            socket.display()
        );
    }
    if pid <= 0 {
        bail!(
            "the process serving {} is outside this pid namespace: run the installer in the \
             host's (podman --pid host, hostPID: true)",
            socket.display()
        );
    }
    Ok(nix::unistd::Pid::from_raw(pid))
}

#[cfg(test)]
#[path = "restart_tests.rs"]
mod tests;
