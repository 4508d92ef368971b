//! `gpuhook cdi generate|list|validate`.

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};

use crate::config::Config;
use crate::request::{validate_class, validate_vendor};

/// `gpuhook cdi ...`.
#[derive(Debug, Clone, Subcommand)]
pub enum CdiCommand {
    /// Generate a CDI spec for this node's GPUs
    #[command(long_about = "Generate a CDI spec for this node's GPUs.\n\n\
        Discovers GPUs, MIG devices and driver files under --driver-root (NVML from --nvml-lib when \
        available, /proc otherwise) and writes a spec with one device per GPU/MIG device and name \
        strategy plus an `all` device. The file is written atomically (temp file + rename) with mode \
        0644 and the lowest cdiVersion its contents need.")]
    Generate(GenerateArgs),
    /// List the CDI devices defined in the spec directories
    List(ListArgs),
    /// Validate a CDI spec file (JSON schema and spec rules)
    Validate(ValidateArgs),
}

/// Output format of a spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SpecFormat {
    Json,
    Yaml,
}

/// How devices are named in a generated spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum NameStrategy {
    /// `0`, MIG `0:1`
    Index,
    /// `GPU-<uuid>`, `MIG-<uuid>`
    Uuid,
    /// `gpu0`, MIG `mig0:1`
    TypeIndex,
}

/// Arguments of `gpuhook cdi generate`.
#[derive(Debug, Clone, Args)]
pub struct GenerateArgs {
    /// Root of the driver installation [default: driver-root from the config]
    #[arg(long, value_name = "DIR")]
    pub driver_root: Option<PathBuf>,
    /// Root of /dev/nvidia* [default: dev-root from the config, else the driver root]
    #[arg(long, value_name = "DIR")]
    pub dev_root: Option<PathBuf>,
    /// libnvidia-ml.so.1 to load [default: found through the driver root's ld.so.cache]
    #[arg(long, value_name = "PATH")]
    pub nvml_lib: Option<PathBuf>,
    /// Write the spec to FILE, or to DIR/<vendor>-<class>.<format> [default: stdout]
    #[arg(long, short, value_name = "FILE|DIR")]
    pub output: Option<PathBuf>,
    /// Spec format [default: from the output file's extension, else json]
    #[arg(long, value_enum)]
    pub format: Option<SpecFormat>,
    /// Device names to emit, comma-separated
    #[arg(long, value_enum, value_delimiter = ',', default_value = "index,uuid")]
    pub device_name_strategy: Vec<NameStrategy>,
    /// CDI vendor
    #[arg(long, default_value = "nvidia.com", value_parser = vendor)]
    pub vendor: String,
    /// CDI class
    #[arg(long, default_value = "gpu", value_parser = class)]
    pub class: String,
}

fn vendor(s: &str) -> Result<String, String> {
    validate_vendor(s).map(|()| s.to_string())
}

fn class(s: &str) -> Result<String, String> {
    validate_class(s).map(|()| s.to_string())
}

/// Arguments of `gpuhook cdi list`.
#[derive(Debug, Clone, Args)]
pub struct ListArgs {
    /// Spec directory, lowest priority first; repeatable [default: cdi-spec-dirs from the config]
    #[arg(long = "spec-dir", value_name = "DIR")]
    pub spec_dirs: Vec<PathBuf>,
}

/// Arguments of `gpuhook cdi validate`.
#[derive(Debug, Clone, Args)]
pub struct ValidateArgs {
    /// Spec file (.json or .yaml)
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
}

pub(super) fn run(command: &CdiCommand, config: &Config) -> anyhow::Result<()> {
    match command {
        CdiCommand::Generate(args) => generate(args, config),
        CdiCommand::List(args) => list(args, config),
        CdiCommand::Validate(args) => validate(args, config),
    }
}

fn generate(args: &GenerateArgs, config: &Config) -> anyhow::Result<()> {
    // WIRE: gpuhook-node discovery (NVML or procfs) -> gpuhook-cdi generate -> atomic write.
    tracing::debug!(?args, driver_root = %config.driver_root.display(), "cdi generate");
    anyhow::bail!("`gpuhook cdi generate` is not wired yet")
}

fn list(args: &ListArgs, config: &Config) -> anyhow::Result<()> {
    // WIRE: gpuhook-cdi registry over args.spec_dirs (or config.cdi_spec_dirs), print qualified names.
    tracing::debug!(?args, dirs = ?config.cdi_spec_dirs, "cdi list");
    anyhow::bail!("`gpuhook cdi list` is not wired yet")
}

fn validate(args: &ValidateArgs, config: &Config) -> anyhow::Result<()> {
    // WIRE: gpuhook-cdi validate (schema + spec rules) of args.file.
    tracing::debug!(?args, log_level = ?config.log_level, "cdi validate");
    anyhow::bail!("`gpuhook cdi validate` is not wired yet")
}
