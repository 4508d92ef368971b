//! The `gpuhook-mig-parted` command line, compatible with `nvidia-mig-parted`: `apply`,
//! `assert`, `export`, the same flags and environment variables (`MIG_PARTED_CONFIG_FILE`,
//! `MIG_PARTED_SELECTED_CONFIG`, `MIG_PARTED_MODE_CHANGE_ONLY`, `MIG_PARTED_SKIP_RESET`,
//! `MIG_PARTED_DEBUG`), plus `--dry-run`, `--drain` and `--driver-root` (NVML is loaded from the
//! driver root only, as by gpuhook's other tools).
//!
//! Exit status: 0 applied / asserted, 1 an error (nothing changed on a GPU whose plan failed),
//! 3 applied as far as possible but a MIG mode change waits for a GPU reset or reboot.

use std::io::Read;
use std::path::{Path, PathBuf};

use clap::{Args, Parser, Subcommand};

use crate::apply::{apply, ApplyOptions, GpuStatus, MigBackend};
use crate::assertion::assert_applied;
use crate::export::export_yaml;
use crate::holders::DeviceHolders;
use crate::nvml_backend::NvmlBackend;
use crate::spec::{MigConfigFile, MAX_CONFIG_BYTES};

/// Exit status when a mode change is pending.
pub const EXIT_PENDING: u8 = 3;

#[derive(Debug, Parser)]
#[command(
    name = "gpuhook-mig-parted",
    version,
    about = "MIG partition editor compatible with nvidia-mig-parted"
)]
pub struct Cli {
    /// Debug logging.
    #[arg(short = 'd', long, global = true, env = "MIG_PARTED_DEBUG")]
    pub debug: bool,
    /// The driver root: NVML is loaded from its ld.so.cache / standard library folders only.
    #[arg(long, global = true, default_value = "/", env = "NVIDIA_DRIVER_ROOT")]
    pub driver_root: PathBuf,
    /// Use exactly this NVML library instead of finding it under the driver root.
    #[arg(long, global = true)]
    pub nvml_lib: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Apply a MIG configuration to the selected GPUs.
    Apply(ApplyArgs),
    /// Check that a MIG configuration is applied.
    Assert(AssertArgs),
    /// Print the current MIG layout as a config.
    Export(ExportArgs),
}

#[derive(Debug, Args)]
pub struct ConfigArgs {
    /// Config file (`-` for stdin).
    #[arg(short = 'f', long = "config-file", env = "MIG_PARTED_CONFIG_FILE")]
    pub config_file: PathBuf,
    /// The config to apply (needed when the file has more than one).
    #[arg(
        short = 'c',
        long = "selected-config",
        env = "MIG_PARTED_SELECTED_CONFIG"
    )]
    pub selected_config: Option<String>,
    /// Only the MIG mode.
    #[arg(short = 'm', long = "mode-only", env = "MIG_PARTED_MODE_CHANGE_ONLY")]
    pub mode_only: bool,
}

#[derive(Debug, Args)]
pub struct ApplyArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// mig-parted hooks file: not supported (refused, so no hook is silently skipped).
    #[arg(short = 'k', long = "hooks-file", env = "MIG_PARTED_HOOKS_FILE")]
    pub hooks_file: Option<PathBuf>,
    /// Never reset GPUs (gpuhook never does: a pending mode change is reported, exit 3).
    #[arg(short = 's', long = "skip-reset", env = "MIG_PARTED_SKIP_RESET")]
    pub skip_reset: bool,
    /// Print the plan, change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Destroy MIG devices (and change MIG modes) even when processes, pods or MPS clients hold
    /// them.
    #[arg(long)]
    pub drain: bool,
    /// The kubelet's pod-resources socket: a MIG device the kubelet allocated to a running pod is
    /// not destroyed (unless --drain); no socket there (no kubelet): no pod is checked.
    #[arg(
        long,
        value_name = "SOCKET",
        default_value = "/var/lib/kubelet/pod-resources/kubelet.sock"
    )]
    pub pod_resources_socket: PathBuf,
    /// gpuhook's MPS root: the live clients in gpu-mps-daemon's status file hold their GPUs.
    #[arg(long, value_name = "DIR", default_value = "/run/gpuhook/mps")]
    pub mps_root: PathBuf,
    /// The host's /proc, where an MPS client's process is looked up.
    #[arg(long, value_name = "DIR", default_value = "/proc")]
    pub host_proc: PathBuf,
}

/// Who holds the node's devices besides NVML's processes, for `apply` (the binary reads the
/// kubelet's pod-resources and gpu-mps-daemon's clients from the [`ApplyArgs`] paths).
pub type HolderSource<'a> = &'a dyn Fn(&ApplyArgs, &NvmlBackend) -> anyhow::Result<DeviceHolders>;

#[derive(Debug, Args)]
pub struct AssertArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Only check that the file is valid and names the config.
    #[arg(short = 'a', long = "valid-config")]
    pub valid_config: bool,
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// `yaml` or `json`.
    #[arg(short = 'o', long = "output-format", default_value = "yaml")]
    pub output_format: String,
    /// The config name to write.
    #[arg(short = 'l', long = "config-label", default_value = "current")]
    pub config_label: String,
}

/// Reads and parses the config file (bounded), naming it in errors.
pub fn read_config(path: &Path) -> anyhow::Result<MigConfigFile> {
    let limit = u64::try_from(MAX_CONFIG_BYTES).unwrap_or(u64::MAX) + 1;
    let mut bytes = Vec::new();
    let name = path.display().to_string();
    if name == "-" {
        std::io::stdin().take(limit).read_to_end(&mut bytes)?;
    } else {
        std::fs::File::open(path)
            .and_then(|f| f.take(limit).read_to_end(&mut bytes))
            .map_err(|e| anyhow::anyhow!("cannot read config file {name}: {e}"))?;
    }
    Ok(MigConfigFile::parse(&bytes, &name)?)
}

fn backend(cli: &Cli) -> anyhow::Result<NvmlBackend> {
    let loc = gpuhook_node::NvmlLocation::locate(&cli.driver_root, cli.nvml_lib.as_deref())?;
    Ok(NvmlBackend::new(gpuhook_node::Nvml::load(&loc)?))
}

/// Runs the CLI with NVML's processes as the only holders; returns the exit status.
pub fn run(cli: &Cli) -> anyhow::Result<u8> {
    run_with(cli, &|_, b| Ok(b.device_processes()?))
}

/// Runs the CLI, `holders` telling who holds each device at `apply`; returns the exit status.
pub fn run_with(cli: &Cli, holders: HolderSource<'_>) -> anyhow::Result<u8> {
    match &cli.command {
        Command::Apply(a) => run_apply(cli, a, holders),
        Command::Assert(a) => run_assert(cli, a),
        Command::Export(e) => run_export(cli, e),
    }
}

fn run_apply(cli: &Cli, a: &ApplyArgs, holders: HolderSource<'_>) -> anyhow::Result<u8> {
    if let Some(k) = &a.hooks_file {
        anyhow::bail!(
            "hooks file {}: gpuhook-mig-parted does not run mig-parted hooks; stop the GPU clients before applying (gpuhook's agent pauses them), then apply without -k/MIG_PARTED_HOOKS_FILE",
            k.display()
        );
    }
    let file = read_config(&a.config.config_file)?;
    let name = file
        .selected_name(a.config.selected_config.as_deref())?
        .to_string();
    let entries = file.config(&name)?;
    let mut b = backend(cli)?;
    let opts = ApplyOptions {
        dry_run: a.dry_run,
        drain: a.drain,
        mode_only: a.config.mode_only,
    };
    // Who holds each device now; --drain destroys whatever holds them.
    let holders = if a.drain || a.dry_run {
        DeviceHolders::default()
    } else {
        holders(a, &b)?
    };
    let out = apply(&mut b, entries, &holders, opts)?;
    let mut code = 0;
    for g in &out.gpus {
        if a.dry_run || cli.debug {
            for p in &g.plans {
                print!("{p}");
            }
        }
        match &g.status {
            GpuStatus::Failed(why) => {
                eprintln!("error: {why}");
                code = 1;
            }
            GpuStatus::PendingReset => {
                println!("GPU {}: MIG mode change pending: reset the GPU (nvidia-smi -r) or reboot, then apply again", g.index);
                if code == 0 {
                    code = EXIT_PENDING;
                }
            }
            _ => {}
        }
    }
    if code == 0 && !a.dry_run {
        println!("MIG configuration applied successfully");
    }
    Ok(code)
}

fn run_assert(cli: &Cli, a: &AssertArgs) -> anyhow::Result<u8> {
    let file = read_config(&a.config.config_file)?;
    let name = file
        .selected_name(a.config.selected_config.as_deref())?
        .to_string();
    let entries = file.config(&name)?;
    if a.valid_config {
        println!("Selected MIG configuration is valid");
        return Ok(0);
    }
    let gpus = backend(cli)?.gpus()?;
    let problems = assert_applied(&gpus, entries, a.config.mode_only)?;
    if problems.is_empty() {
        if a.config.mode_only {
            println!("Selected MIG mode settings from configuration currently applied");
        } else {
            println!("Selected MIG configuration currently applied");
        }
        return Ok(0);
    }
    for p in &problems {
        eprintln!("{p}");
    }
    eprintln!("Assertion failure: selected configuration not currently applied");
    Ok(1)
}

fn run_export(cli: &Cli, e: &ExportArgs) -> anyhow::Result<u8> {
    let gpus = backend(cli)?.gpus()?;
    let yaml = export_yaml(&gpus, &e.config_label);
    match e.output_format.as_str() {
        "yaml" => print!("{yaml}"),
        "json" => {
            let v: serde_json::Value = yaml_serde::from_str(&yaml)?;
            println!("{}", serde_json::to_string_pretty(&v)?);
        }
        other => anyhow::bail!("unknown output format {other:?}: use yaml or json"),
    }
    Ok(0)
}
