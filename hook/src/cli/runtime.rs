//! `gpuhook runtime configure`: register gpuhook-runtime with containerd.

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};

use crate::config::Config;

/// `gpuhook runtime ...`.
#[derive(Debug, Clone, Subcommand)]
pub enum RuntimeCommand {
    /// Add a gpuhook runtime to containerd's config
    #[command(long_about = "Add a gpuhook runtime to containerd's config.\n\n\
        Adds a runtime (runtime_type io.containerd.runc.v2, options.BinaryName = --runtime-path) to the \
        CRI plugin table of the config version found (v1, v2 or v3), copying the options of the \
        existing runc runtime (SystemdCgroup included). With --drop-in the change goes to a separate \
        file that the main config imports. Files are written atomically and only when something \
        changed; restart containerd afterwards. Select the runtime in Kubernetes with a RuntimeClass \
        whose handler is --runtime-name.")]
    Configure(ConfigureArgs),
}

/// Runtimes `configure` knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RuntimeKind {
    Containerd,
}

/// Arguments of `gpuhook runtime configure`.
#[derive(Debug, Clone, Args)]
pub struct ConfigureArgs {
    /// Which runtime to configure
    #[arg(long, value_enum, default_value = "containerd")]
    pub runtime: RuntimeKind,
    /// The runtime's main config file
    #[arg(
        long,
        value_name = "FILE",
        default_value = "/etc/containerd/config.toml"
    )]
    pub config: PathBuf,
    /// Write the runtime to a drop-in file and add it to the main config's imports
    #[arg(long)]
    pub drop_in: bool,
    /// The drop-in file (with --drop-in)
    #[arg(
        long,
        value_name = "FILE",
        default_value = "/etc/containerd/conf.d/99-gpuhook.toml"
    )]
    pub drop_in_path: PathBuf,
    /// Name of the runtime entry (the RuntimeClass handler)
    #[arg(long, value_name = "NAME", default_value = "gpuhook")]
    pub runtime_name: String,
    /// Path of the gpuhook-runtime binary
    #[arg(long, value_name = "PATH", default_value = "/usr/bin/gpuhook-runtime")]
    pub runtime_path: PathBuf,
    /// Also make it the default runtime
    #[arg(long)]
    pub set_as_default: bool,
    /// Turn on enable_cdi in the CRI plugin (containerd 1.7+)
    #[arg(long)]
    pub enable_cdi: bool,
    /// Print the resulting file(s) on stdout instead of writing them
    #[arg(long)]
    pub dry_run: bool,
}

pub(super) fn run(command: &RuntimeCommand, config: &Config) -> anyhow::Result<()> {
    match command {
        RuntimeCommand::Configure(args) => {
            // WIRE: toml_edit containerd config update (v1/v2/v3 tables, drop-in, atomic write).
            tracing::debug!(?args, mode = ?config.runtime.mode, "runtime configure");
            anyhow::bail!("`gpuhook runtime configure` is not wired yet")
        }
    }
}
