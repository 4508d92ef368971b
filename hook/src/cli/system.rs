//! `gpuhook system ...`: node setup.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::config::Config;

/// `gpuhook system ...`.
#[derive(Debug, Clone, Subcommand)]
pub enum SystemCommand {
    /// Create /dev/char/MAJ:MIN symlinks for the NVIDIA device nodes
    #[command(
        long_about = "Create /dev/char/<major>:<minor> symlinks for the NVIDIA device nodes.\n\n\
        systemd's device cgroup rules refer to devices through /dev/char; without these links a \
        `systemctl daemon-reload` can drop access to GPUs that were granted behind its back \
        (\"Failed to initialize NVML: Unknown Error\"). Run it after the driver loads."
    )]
    CreateDevCharSymlinks(CreateDevCharSymlinksArgs),
}

/// Arguments of `gpuhook system create-dev-char-symlinks`.
#[derive(Debug, Clone, Args)]
pub struct CreateDevCharSymlinksArgs {
    /// Root of the driver installation [default: driver-root from the config]
    #[arg(long, value_name = "DIR")]
    pub driver_root: Option<PathBuf>,
    /// Root of /dev/nvidia* [default: dev-root from the config]
    #[arg(long, value_name = "DIR")]
    pub dev_root: Option<PathBuf>,
    /// Where the links go
    #[arg(long, value_name = "DIR", default_value = "/dev/char")]
    pub dev_char_path: PathBuf,
    /// Print what would be created, change nothing
    #[arg(long)]
    pub dry_run: bool,
}

pub(super) fn run(command: &SystemCommand, config: &Config) -> anyhow::Result<()> {
    match command {
        SystemCommand::CreateDevCharSymlinks(args) => {
            // WIRE: gpuhook-node device discovery -> /dev/char/MAJ:MIN links (idempotent).
            tracing::debug!(?args, dev_root = %config.dev_root().display(), "system create-dev-char-symlinks");
            anyhow::bail!("`gpuhook system create-dev-char-symlinks` is not wired yet")
        }
    }
}
