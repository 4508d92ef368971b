//! The `gpuhook` command line: argument definitions and dispatch.
//!
//! It lives in the library (not the binary) so that argument parsing is unit-tested and the
//! binary stays a three-line `main`. This is the one place in the crate that uses `anyhow`: it is
//! the process boundary, where library errors become one line on stderr and an exit status.

pub mod app_profile;
mod cdi;
mod doctor;
mod hook;
mod prestart;
mod runtime;
mod system;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub use cdi::{CdiCommand, GenerateArgs, ListArgs, NameStrategy, SpecFormat, ValidateArgs};
pub use doctor::DoctorArgs;
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

/// Runs the command line; the binary's whole `main`.
pub fn main() -> ExitCode {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let cli = prestart_fast_path(&argv).unwrap_or_else(|| Cli::parse_from(&argv));
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gpuhook: error: {}", one_line(&e));
            ExitCode::from(EXIT_FAILURE)
        }
    }
}

/// The argv a runtime passes to the prestart hook on *every* container start (`gpuhook prestart`
/// or `gpuhook prestart --config FILE`), parsed without building clap's whole command tree: the
/// hook's cost is paid by every container, GPU or not. Anything else (help, other flags) returns
/// `None` and goes through clap. `--config` after `prestart` becomes the top-level config, which
/// is what `prestart --config` means (that file's settings, logging included).
pub fn prestart_fast_path(argv: &[std::ffi::OsString]) -> Option<Cli> {
    let config = match argv.get(1..)? {
        [cmd] if cmd == "prestart" => None,
        [cmd, flag, file] if cmd == "prestart" && flag == "--config" && !file.is_empty() => {
            Some(PathBuf::from(file))
        }
        _ => return None,
    };
    // The env var is the top-level --config's default, as with clap.
    let config = config.or_else(|| {
        std::env::var_os(CONFIG_ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    });
    Some(Cli {
        config,
        log_level: None,
        log_file: None,
        log_format: LogFormat::from_env(),
        command: Command::Prestart(PrestartArgs {
            state: None,
            config: None,
        }),
    })
}

/// The error and its causes on one line (`outer: inner: root`).
pub fn one_line(e: &anyhow::Error) -> String {
    format!("{e:#}").replace(['\n', '\r'], " ")
}

/// Loads the config, initialises logging once, and dispatches.
pub fn run(cli: Cli) -> anyhow::Result<()> {
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

fn dispatch(command: Command, config: &Config) -> anyhow::Result<()> {
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
