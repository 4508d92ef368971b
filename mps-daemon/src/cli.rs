//! Command line: `gpu-mps-daemon --config FILE [...]` runs the daemon; `status` reports on it.
//!
//! The arguments only (the deployment tests parse the shipped manifests with them); what each
//! command does is in [`crate::run`].

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::config::parse_duration;

#[derive(Debug, Parser)]
#[command(
    name = "gpu-mps-daemon",
    version,
    about = "Runs and supervises one nvidia-cuda-mps-control daemon per shared GPU",
    args_conflicts_with_subcommands = true,
    after_help = "Examples:\n  \
        gpu-mps-daemon --config /etc/gpuhook/mps.yaml --listen 127.0.0.1:9464\n  \
        gpu-mps-daemon check --config /etc/gpuhook/mps.yaml\n  \
        gpu-mps-daemon status --mps-root /run/gpuhook/mps"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the per-GPU state of a running daemon (from <mpsRoot>/status.json).
    #[command(after_help = "Examples:\n  \
        gpu-mps-daemon status\n  \
        gpu-mps-daemon status --json --mps-root /run/gpuhook/mps\n  \
        gpu-mps-daemon status --config /etc/gpuhook/mps.yaml")]
    Status(StatusArgs),
    /// Check a config against the node and print the resulting limits, without starting anything.
    #[command(after_help = "Examples:\n  \
        gpu-mps-daemon check --config /etc/gpuhook/mps.yaml\n  \
        gpu-mps-daemon check --config /etc/gpuhook/mps.yaml --driver-root /run/nvidia/driver")]
    Check(Box<RunArgs>),
}

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Json,
    Text,
}

#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Log line format on stderr: json or text (colours only when stderr is a terminal)
    #[arg(long, value_name = "FORMAT", env = "GPUHOOK_LOG_FORMAT", value_enum)]
    pub log_format: Option<LogFormat>,
    /// Sharing config (k8s-device-plugin format plus `mpsDaemon`).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Serve /healthz, /readyz and /status on this address (e.g. 127.0.0.1:9464).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Overrides mpsDaemon.mpsRoot.
    #[arg(long, value_name = "DIR")]
    pub mps_root: Option<PathBuf>,
    /// Overrides mpsDaemon.driverRoot.
    #[arg(long, value_name = "DIR")]
    pub driver_root: Option<PathBuf>,
    /// Overrides mpsDaemon.controlBinary.
    #[arg(long, value_name = "PATH")]
    pub control_binary: Option<PathBuf>,
    /// Overrides mpsDaemon.probeInterval (e.g. 500ms).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_arg)]
    pub probe_interval: Option<std::time::Duration>,
    /// Host path of libnvidia-ml to use instead of the driver root's.
    #[arg(long, value_name = "PATH")]
    pub nvml_lib: Option<PathBuf>,
    /// Overrides mpsDaemon.cdiSpecDir (where nvidia.com-gpu-mps.json is written).
    #[arg(long, value_name = "DIR")]
    pub cdi_spec_dir: Option<PathBuf>,
    /// Overrides mpsDaemon.gpuhookPath (the gpuhook binary the CDI spec's hooks run).
    #[arg(long, value_name = "PATH")]
    pub gpuhook_path: Option<PathBuf>,
    /// CRI runtime socket (e.g. /run/containerd/containerd.sock): name the pod, namespace and
    /// container of each MPS client in status and metrics (off when not given).
    #[arg(long, value_name = "PATH")]
    pub cri_socket: Option<PathBuf>,
    /// Take GPU facts from a serialised gpuhook inventory instead of discovering them.
    #[arg(long, value_name = "FILE", hide = true)]
    pub inventory_json: Option<PathBuf>,
}

#[derive(Debug, Clone, Args)]
pub struct StatusArgs {
    /// Print the status file as JSON.
    #[arg(long)]
    pub json: bool,
    /// MPS root of the daemon (default: from --config, else /run/gpuhook/mps).
    #[arg(long, value_name = "DIR")]
    pub mps_root: Option<PathBuf>,
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// A command-line duration that does not parse.
#[derive(Debug, thiserror::Error)]
#[error("invalid duration {0:?} (use e.g. 500ms, 5s)")]
pub struct DurationArgError(String);

fn parse_duration_arg(s: &str) -> Result<std::time::Duration, DurationArgError> {
    parse_duration(s).ok_or_else(|| DurationArgError(s.to_string()))
}
