//! `gpuhook system ...`: node setup.

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, Subcommand};
use gpuhook_inject::discover_dev_char_nodes;

use super::CliError;
use crate::config::Config;

/// `gpuhook system ...`.
#[derive(Debug, Clone, Subcommand)]
#[command(after_help = "Examples:\n  \
    gpuhook system create-dev-char-symlinks --dry-run\n  \
    gpuhook system create-dev-char-symlinks")]
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
#[command(
    after_help = "Examples:\n  gpuhook system create-dev-char-symlinks --dry-run\n  \
    gpuhook system create-dev-char-symlinks --driver-root /run/nvidia/driver --dev-root /"
)]
pub struct CreateDevCharSymlinksArgs {
    /// Root of the driver installation [default: driver-root from the config]
    #[arg(long, value_name = "DIR")]
    pub driver_root: Option<PathBuf>,
    /// Root under which /dev/nvidia* live [default: dev-root from the config, else the driver root]
    #[arg(long, value_name = "DIR")]
    pub dev_root: Option<PathBuf>,
    /// Where the links go, as a path under the dev root; must be `<devices dir>/char`
    #[arg(long, value_name = "DIR", default_value = "/dev/char")]
    pub dev_char_path: PathBuf,
    /// Print what would be created, change nothing
    #[arg(long)]
    pub dry_run: bool,
}

pub(super) fn run(command: &SystemCommand, config: &Config) -> Result<(), CliError> {
    match command {
        SystemCommand::CreateDevCharSymlinks(args) => create_dev_char_symlinks(args, config),
    }
}

/// The host directory holding the device nodes (`<dev-root>/dev`), from `--dev-char-path`.
fn devices_dir(args: &CreateDevCharSymlinksArgs, config: &Config) -> Result<PathBuf, CliError> {
    let dev_root = match (&args.dev_root, &args.driver_root) {
        (Some(d), _) => d.clone(),
        (None, Some(driver)) if config.dev_root.is_none() => driver.clone(),
        (None, _) => config.dev_root().to_path_buf(),
    };
    if !dev_root.is_absolute() {
        return Err(CliError::DevRootNotAbsolute { path: dev_root });
    }
    let char_dir = &args.dev_char_path;
    let parent = match (char_dir.file_name(), char_dir.parent()) {
        (Some(name), Some(parent)) if name == "char" && char_dir.is_absolute() => parent,
        _ => {
            return Err(CliError::DevCharPath {
                path: char_dir.clone(),
            })
        }
    };
    Ok(gpuhook_node::join_under(&dev_root, parent))
}

fn create_dev_char_symlinks(
    args: &CreateDevCharSymlinksArgs,
    config: &Config,
) -> Result<(), CliError> {
    let dev = devices_dir(args, config)?;
    let nodes = discover_dev_char_nodes(&dev).map_err(|error| CliError::ListDevNodes {
        dev: dev.clone(),
        error,
    })?;
    if nodes.is_empty() {
        tracing::warn!(dev = %dev.display(), "no NVIDIA device nodes found; is the driver loaded?");
    }
    let mut out = std::io::stdout().lock();
    if args.dry_run {
        for n in &nodes {
            writeln!(
                out,
                "would link {}/char/{}:{} -> ../{}",
                dev.display(),
                n.major,
                n.minor,
                n.path.display()
            )?;
        }
        return Ok(());
    }
    let made = gpuhook_inject::create_dev_char_symlinks(&dev, &nodes).map_err(|error| {
        CliError::CreateDevLinks {
            dev: dev.clone(),
            error,
        }
    })?;
    for ((link, outcome), n) in made.iter().zip(&nodes) {
        writeln!(
            out,
            "{outcome:?} {}{} -> ../{}",
            dev.display(),
            link.display(),
            n.path.display()
        )?;
    }
    tracing::info!(dev = %dev.display(), links = made.len(), "dev/char links in place");
    Ok(())
}
