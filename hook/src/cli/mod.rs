//! The `gpuhook` command line: argument definitions and dispatch.
//!
//! It lives in the library (not the binary) so that argument parsing is unit-tested and the
//! binary is only its process start-up ([`status`] is its whole work). [`status`] is the process
//! boundary, where a [`CliError`] becomes one line on stderr ([`one_line`]) and an exit status.

pub mod app_profile;
mod cdi;
mod doctor;
mod error;
mod fast_generate;
mod fast_path;
mod hook;
pub mod nvidia_hook;
mod oci_hook;
mod prestart;
mod runtime;
mod system;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub use cdi::{CdiCommand, GenerateArgs, ListArgs, NameStrategy, SpecFormat, ValidateArgs};
pub use doctor::DoctorArgs;
pub use error::{one_line, CdiCliError, CliError};
pub use fast_path::{cdi_generate_fast_path, prestart_fast_path};
pub use hook::{
    CreateSymlinksArgs, DisableDeviceNodeModificationArgs, HookCommand, LinkSpec, SetupArgs,
    UpdateLdcacheArgs,
};
pub use prestart::PrestartArgs;
pub use runtime::{ConfigureArgs, RuntimeCommand, RuntimeKind};
pub use system::{CreateDevCharSymlinksArgs, SystemCommand};

use crate::config::{Config, CONFIG_ENV};
use crate::logging::{self, LogFormat, LogLevel};

/// Exit status of a failed command (usage errors exit with 2, from clap).
pub const EXIT_FAILURE: u8 = 1;

/// gpuhook: give containers NVIDIA GPUs.
#[derive(Debug, Parser)]
#[command(
    name = "gpuhook",
    version,
    about = "Give containers NVIDIA GPUs: OCI prestart hook, CDI spec generator and helpers",
    long_about = "gpuhook gives containers NVIDIA GPUs.\n\n\
        It is an OCI prestart hook (`gpuhook prestart`), a CDI spec generator (`gpuhook cdi generate`), \
        the createContainer hooks those specs reference (`gpuhook hook ...`), and node helpers \
        (`gpuhook system ...`, `gpuhook runtime configure`).\n\n\
        Settings are read from /etc/gpuhook/config.toml (see config.toml.example); a missing default \
        file means defaults. Diagnostics go to the configured log file or stderr, never stdout.",
    after_help = "Examples:\n  gpuhook cdi generate && gpuhook cdi list\n  \
        gpuhook --log-format json doctor\n  gpuhook runtime configure --drop-in --dry-run"
)]
pub struct Cli {
    /// Config file [default: /etc/gpuhook/config.toml; must exist when given]
    #[arg(long, value_name = "FILE", env = CONFIG_ENV, global = false)]
    pub config: Option<PathBuf>,
    /// Log verbosity (overrides log-level in the config)
    #[arg(long, value_name = "LEVEL", value_enum)]
    pub log_level: Option<LogLevel>,
    /// Append logs to this file instead of stderr (overrides log-file in the config)
    #[arg(long, value_name = "FILE")]
    pub log_file: Option<PathBuf>,
    /// Log line format (overrides log-format in the config)
    #[arg(long, value_name = "FORMAT", value_enum, env = logging::LOG_FORMAT_ENV)]
    pub log_format: Option<LogFormat>,
    #[command(subcommand)]
    pub command: Command,
}

/// Top-level commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// OCI prestart hook: inject the GPUs a container asks for (reads the OCI state on stdin)
    #[command(long_about = "OCI prestart hook.\n\n\
        Reads the container state (JSON) from stdin, loads the bundle's config.json and injects the \
        GPUs, driver files and device nodes the container asks for (cdi.k8s.io/* annotations, \
        /var/run/nvidia-container-devices/ mounts, NVIDIA_VISIBLE_DEVICES, NVIDIA_DRIVER_CAPABILITIES, \
        NVIDIA_REQUIRE_*). Containers that ask for nothing are left untouched, without discovery.")]
    Prestart(PrestartArgs),
    /// Generate, list and validate CDI specs
    #[command(subcommand)]
    Cdi(CdiCommand),
    /// createContainer hooks referenced by generated CDI specs
    #[command(subcommand)]
    Hook(HookCommand),
    /// Node setup helpers
    #[command(subcommand)]
    System(SystemCommand),
    /// Configure a container runtime to use gpuhook-runtime
    #[command(subcommand)]
    Runtime(RuntimeCommand),
    /// Explain why this node or a container has no GPU: each check ok/warn/fail with its fix
    Doctor(Box<DoctorArgs>),
    /// Print the version
    #[command(after_help = "Examples:\n  gpuhook version\n  gpuhook --version")]
    Version,
}

/// Runs the command line: the binary's whole `main` ([`status`] as an exit code).
pub fn main() -> ExitCode {
    ExitCode::from(status())
}

/// Runs the command line; returns the exit status (usage errors exit from clap, with 2).
pub fn status() -> u8 {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    // Called as `nvidia-container-runtime-hook` (dockerd's `--gpus`): NVIDIA's hook command line.
    let cli = match nvidia_hook::from_argv(&argv, |name| std::env::var_os(name)) {
        Some(nvidia_hook::HookCall::Prestart(cli)) => Some(*cli),
        Some(nvidia_hook::HookCall::Exit {
            code,
            stdout,
            stderr,
        }) => {
            print!("{stdout}");
            eprint!("{stderr}");
            return code;
        }
        None => None,
    };
    let cli = cli
        .or_else(|| prestart_fast_path(&argv))
        .or_else(|| cdi_generate_fast_path(&argv, |name| std::env::var_os(name)))
        .unwrap_or_else(|| Cli::parse_from(&argv));
    match run(cli) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("gpuhook: error: {}", one_line(&e));
            EXIT_FAILURE
        }
    }
}

/// Loads the config, initialises logging once, and dispatches.
pub fn run(cli: Cli) -> Result<(), CliError> {
    if let Command::Version = cli.command {
        println!("gpuhook {}", env!("CARGO_PKG_VERSION"));
        return Ok(());
    }
    let config = Config::load(cli.config.as_deref())?;
    let mut log = config.log_settings();
    log.level = cli.log_level.unwrap_or(log.level);
    log.format = cli.log_format.unwrap_or(log.format);
    if cli.log_file.is_some() {
        log.file = cli.log_file;
    }
    logging::init(&log)?;
    let result = dispatch(cli.command, &config);
    if let (Err(e), Some(_)) = (&result, &log.file) {
        // Into the file too; on stderr the caller prints the one error line.
        tracing::error!(error = %one_line(e), "command failed");
    }
    result
}

fn dispatch(command: Command, config: &Config) -> Result<(), CliError> {
    match command {
        Command::Prestart(args) => prestart::run(&args, config),
        Command::Cdi(c) => cdi::run(&c, config),
        Command::Hook(c) => hook::run(&c, config),
        Command::System(c) => system::run(&c, config),
        Command::Runtime(c) => runtime::run(&c, config),
        Command::Doctor(args) => doctor::run(&args, config),
        Command::Version => Ok(()),
    }
}

#[cfg(test)]
mod tests;
