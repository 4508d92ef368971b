//! Making containerd pick up the runtime `install` registered (and `uninstall` removed).
//!
//! containerd reads its config only at start, so a runtime class is unusable until it
//! restarts. The modes are those of NVIDIA's toolkit container (`--restart-mode`,
//! `RUNTIME_RESTART_MODE`; `Options.Restart` in `cmd/nvidia-ctk-installer/container/
//! container.go`), with containerd's default `signal` (`DefaultRestartMode` in
//! `.../runtime/containerd/containerd.go`):
//! - `signal`: SIGHUP to the process serving containerd's socket (NVIDIA's `SignalContainerd`
//!   finds it from the socket's peer credentials, as here). containerd does not handle SIGHUP,
//!   so it exits and its service manager (`Restart=always`) starts it again on the new config.
//! - `systemd`: `systemctl restart containerd`, run in the host root (NVIDIA: `chroot /host
//!   systemctl restart containerd`; this process is already chrooted there), with
//!   `SYSTEMD_IGNORE_CHROOT=1`, without which systemctl ignores the request in a chroot.
//! - `none`: nothing, and the command to run is printed.
//!
//! Unlike NVIDIA, which restarts on every run, this restarts only when containerd's config
//! really changed (`runtime configure` says so by its exit status), so re-running the
//! installer on a configured node disturbs nothing.

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Args, ValueEnum};

/// The command `--restart-mode none` tells the admin to run on the host.
pub const RESTART_COMMAND: &str = "systemctl restart containerd";

/// Tries to reach containerd's socket, one second apart (it may be restarting itself).
const SIGNAL_ATTEMPTS: u32 = 3;

/// How containerd is made to reload its config.
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
    /// How to make containerd load its changed config (only when it changed): signal = SIGHUP
    /// to containerd (it exits, its service restarts it), systemd = `systemctl restart
    /// containerd` in the host root, none = print the command to run
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
}

/// Restarts containerd as `args` say. Call inside the host root.
pub fn restart(args: &RestartArgs, path_env: &str) -> anyhow::Result<()> {
    match args.restart_mode {
        RestartMode::None => {
            tracing::warn!("not restarting containerd (--restart-mode none)");
            println!(
                "containerd's config changed and containerd was not restarted \
                 (--restart-mode none): run `{RESTART_COMMAND}` on the host"
            );
            Ok(())
        }
        RestartMode::Systemd => systemd_restart(path_env),
        RestartMode::Signal => signal(&args.containerd_socket),
    }
}

fn systemd_restart(path_env: &str) -> anyhow::Result<()> {
    let mut cmd = Command::new("systemctl");
    // systemctl ignores `restart` (exit 0, nothing done) when it thinks it runs in a chroot:
    // here it does, and pid 1 of this pid namespace has another root unless the pod has
    // hostPID. The variable (systemd's docs/ENVIRONMENT.md) makes it talk to the host's
    // systemd through /run/systemd anyway.
    cmd.args(["restart", "containerd"])
        .env_clear()
        .env("PATH", path_env)
        .env("SYSTEMD_IGNORE_CHROOT", "1");
    tracing::info!(command = ?cmd, "restarting containerd");
    let status = cmd
        .status()
        .context("cannot run systemctl in the host root (use --restart-mode signal or none)")?;
    if !status.success() {
        bail!("`{RESTART_COMMAND}` failed ({status})");
    }
    Ok(())
}

fn signal(socket: &Path) -> anyhow::Result<()> {
    let mut attempt = 1;
    let pid = loop {
        match peer_pid(socket) {
            Ok(pid) => break pid,
            Err(e) if attempt >= SIGNAL_ATTEMPTS => {
                return Err(e).context(format!(
                    "cannot signal containerd (is it running? use --restart-mode systemd or \
                     none, and run `{RESTART_COMMAND}`)"
                ))
            }
            Err(e) => {
                tracing::warn!(attempt, error = %format!("{e:#}"), "cannot reach containerd");
                std::thread::sleep(Duration::from_secs(1));
                attempt += 1;
            }
        }
    };
    tracing::info!(pid = pid.as_raw(), "sending SIGHUP to containerd");
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP)
        .with_context(|| format!("cannot send SIGHUP to containerd (pid {pid})"))
}

/// The pid of the process serving `socket`, from the connection's peer credentials.
fn peer_pid(socket: &Path) -> anyhow::Result<nix::unistd::Pid> {
    let stream = UnixStream::connect(socket)
        .with_context(|| format!("cannot connect to {}", socket.display()))?;
    let cred = nix::sys::socket::getsockopt(&stream, nix::sys::socket::sockopt::PeerCredentials)
        .with_context(|| format!("cannot read the peer of {}", socket.display()))?;
    let pid = cred.pid();
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
mod tests {
    use super::*;

    /// The pid `signal` would send SIGHUP to is the one of the process listening on the socket
    /// (here this test process), as NVIDIA's `SignalContainerd` reads it from the credentials.
    #[test]
    fn peer_pid_is_the_listening_process() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("containerd.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        let pid = peer_pid(&socket).unwrap();
        assert_eq!(u32::try_from(pid.as_raw()).unwrap(), std::process::id());
    }

    #[test]
    fn peer_pid_without_a_listener_names_the_socket() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("containerd.sock");
        let err = format!("{:#}", peer_pid(&socket).unwrap_err());
        assert!(err.contains(&socket.display().to_string()), "{err}");
    }
}
