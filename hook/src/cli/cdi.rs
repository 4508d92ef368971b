//! `gpuhook cdi generate|list|validate`.
//!
//! `generate` is the producer side of CDI on a node (discovery -> spec -> atomic write, plus the
//! inventory cache the prestart hook reads); `list` and `validate` show a node's spec directories
//! the way a runtime's CDI library sees them, so an operator can tell why `--device
//! nvidia.com/gpu=0` does not resolve without reading runtime logs.

mod conflicts;
mod empty;
mod generate;
mod nvidia_flags;
mod refresh;
mod takeover;

pub use nvidia_flags::{FlagsError, NvidiaFlags};
pub use refresh::RefreshArgs;

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand, ValueEnum};

use super::{CdiCliError, CliError};
use crate::config::Config;
use crate::request::{validate_class, validate_vendor};

/// `gpuhook cdi ...`.
#[derive(Debug, Clone, Subcommand)]
#[command(after_help = "Examples:\n  \
    gpuhook cdi generate --output /var/run/cdi/nvidia.com-gpu.json\n  \
    gpuhook cdi list\n  \
    gpuhook cdi validate /var/run/cdi/nvidia.com-gpu.json")]
pub enum CdiCommand {
    /// Generate a CDI spec for this node's GPUs
    #[command(
        long_about = "Generate a CDI spec for this node's GPUs.\n\n\
        Discovers GPUs, MIG devices and driver files under --driver-root (NVML from --nvml-lib when \
        given, else the driver root's libnvidia-ml.so.1) and writes a spec with one device per GPU/MIG \
        device and name strategy plus an `all` device. The file is written atomically (temp file + \
        rename) with mode 0644 and the lowest cdiVersion its contents need; an unchanged spec is not \
        rewritten, and a file gpuhook did not write is never replaced. The discovered inventory is \
        also saved for `gpuhook prestart` (--inventory-cache). A one-line summary goes to stderr.",
        after_help = "Examples:\n  \
        gpuhook cdi generate --output /var/run/cdi/nvidia.com-gpu.json\n  \
        gpuhook cdi generate --driver-root /run/nvidia/driver --output - --format yaml\n  \
        gpuhook cdi generate --device-name-strategy uuid --output /etc/cdi/nvidia.yaml"
    )]
    Generate(Box<GenerateArgs>),
    /// Generate the spec now and, with --watch, again whenever the driver or the MIG layout changes
    Refresh(Box<RefreshArgs>),
    /// List the CDI devices defined in the spec directories
    #[command(
        long_about = "List the CDI devices defined in the spec directories.\n\n\
        Applies the rules of the runtimes' CDI library: directories in priority order (a later one \
        wins for the same device), *.json and *.yaml files in lexical order, a device defined by two \
        files of one directory is dropped. Qualified names go to stdout, one per line; broken spec \
        files, and every device defined by more than one file (which files, which one wins, what \
        to do), are reported on stderr. Exits non-zero when nothing could be listed because of errors.",
        after_help = "Examples:\n  \
        gpuhook cdi list\n  \
        gpuhook cdi list --spec-dir /etc/cdi --spec-dir /var/run/cdi --verbose"
    )]
    List(ListArgs),
    /// Validate a CDI spec file (JSON schema and spec rules)
    #[command(
        long_about = "Validate a CDI spec file against the CDI JSON schema and the spec's \
        rules (names, paths, cdiVersion high enough for the contents).\n\n\
        Each problem is printed on stderr with its JSON path; exits non-zero when there is one.",
        after_help = "Examples:\n  \
        gpuhook cdi validate /var/run/cdi/nvidia.com-gpu.json\n  \
        gpuhook cdi validate /etc/cdi/nvidia.yaml"
    )]
    Validate(ValidateArgs),
}

/// Output format of a spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SpecFormat {
    Json,
    Yaml,
}

impl From<SpecFormat> for gpuhook_cdi::Format {
    fn from(f: SpecFormat) -> Self {
        match f {
            SpecFormat::Json => gpuhook_cdi::Format::Json,
            SpecFormat::Yaml => gpuhook_cdi::Format::Yaml,
        }
    }
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

impl From<NameStrategy> for gpuhook_cdi::NameStrategy {
    fn from(s: NameStrategy) -> Self {
        match s {
            NameStrategy::Index => gpuhook_cdi::NameStrategy::Index,
            NameStrategy::Uuid => gpuhook_cdi::NameStrategy::Uuid,
            NameStrategy::TypeIndex => gpuhook_cdi::NameStrategy::TypeIndex,
        }
    }
}

/// Arguments of `gpuhook cdi generate`.
#[derive(Debug, Clone, Args)]
pub struct GenerateArgs {
    /// Root of the driver installation [default: driver-root from the config]
    #[arg(long, value_name = "DIR", env = "NVIDIA_CTK_DRIVER_ROOT")]
    pub driver_root: Option<PathBuf>,
    /// Root of /dev/nvidia* [default: dev-root from the config, else the driver root]
    #[arg(long, value_name = "DIR", env = "NVIDIA_CTK_DEV_ROOT")]
    pub dev_root: Option<PathBuf>,
    /// libnvidia-ml.so.1 to load [default: found through the driver root's ld.so.cache]
    #[arg(long, value_name = "PATH")]
    pub nvml_lib: Option<PathBuf>,
    /// Write the spec to FILE, to DIR/<vendor>-<class>.<format>, or to stdout (`-`)
    /// [default: /var/run/cdi/<vendor>-<class>.<format>]
    #[arg(
        long,
        short,
        value_name = "FILE|DIR",
        env = "NVIDIA_CTK_CDI_OUTPUT_FILE_PATH"
    )]
    pub output: Option<PathBuf>,
    /// Spec format [default: from the output file's extension, else json]
    #[arg(
        long,
        value_enum,
        ignore_case = true,
        env = "NVIDIA_CTK_CDI_GENERATE_OUTPUT_FORMAT"
    )]
    pub format: Option<SpecFormat>,
    /// Device names to emit, comma-separated
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "index,uuid",
        env = "NVIDIA_CTK_CDI_GENERATE_DEVICE_NAME_STRATEGIES"
    )]
    pub device_name_strategy: Vec<NameStrategy>,
    /// CDI vendor
    #[arg(long, visible_alias = "cdi-vendor", default_value = "nvidia.com", value_parser = vendor, env = "NVIDIA_CTK_CDI_GENERATE_VENDOR")]
    pub vendor: String,
    /// CDI class [default: gpu; for --mode gds|mofed|nvswitch|gdrcopy that name, imex: imex-channel]
    #[arg(long, visible_alias = "cdi-class", value_parser = class, env = "NVIDIA_CTK_CDI_GENERATE_CLASS")]
    pub class: Option<String>,
    /// Absolute host path of the gpuhook binary the spec's hooks run [default: this executable]
    #[arg(long, value_name = "PATH")]
    pub gpuhook_path: Option<PathBuf>,
    /// Host ldconfig the update-ldcache hook runs [default: ldconfig from the hook's config]
    #[arg(
        long,
        value_name = "PATH",
        env = "NVIDIA_CTK_CDI_GENERATE_LDCONFIG_PATH"
    )]
    pub ldconfig_path: Option<PathBuf>,
    /// Save the discovered inventory here for `gpuhook prestart`
    /// [default: inventory-cache from the config]
    #[arg(long, value_name = "PATH", conflicts_with = "no_inventory_cache")]
    pub inventory_cache: Option<PathBuf>,
    /// Do not save the inventory cache
    #[arg(long)]
    pub no_inventory_cache: bool,
    /// Generate from /proc/driver/nvidia when NVML is unusable (full GPUs only, no MIG devices)
    #[arg(long)]
    pub allow_procfs_fallback: bool,
    /// Replace a spec file of another tool (NVIDIA's nvidia.yaml) in the output directory that
    /// defines the same devices: gpuhook's spec takes its name, so runtimes see one definition
    #[arg(long)]
    pub force: bool,
    /// Fail (and keep the old spec) when the node has no device to describe, as nvidia-ctk does;
    /// by default gpuhook's spec at the output is removed with a warning (e.g. MIG on, no instance)
    #[arg(long)]
    pub fail_on_empty: bool,
    /// The flags of `nvidia-ctk cdi generate` (see `gpuhook cdi generate --help`)
    #[command(flatten)]
    pub nvidia: NvidiaFlags,
}

/// A `--vendor`/`--class` value that is not a CDI name part; the message is gpuhook-cdi's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidNamePart(String);

fn vendor(s: &str) -> Result<String, InvalidNamePart> {
    validate_vendor(s)
        .map(|()| s.to_string())
        .map_err(|e| InvalidNamePart(e.to_string()))
}

fn class(s: &str) -> Result<String, InvalidNamePart> {
    validate_class(s)
        .map(|()| s.to_string())
        .map_err(|e| InvalidNamePart(e.to_string()))
}

/// Arguments of `gpuhook cdi list`.
#[derive(Debug, Clone, Args)]
pub struct ListArgs {
    /// Spec directory, lowest priority first; repeatable [default: cdi-spec-dirs from the config]
    #[arg(long = "spec-dir", value_name = "DIR")]
    pub spec_dirs: Vec<PathBuf>,
    /// Also print the file that defines each device
    #[arg(long, short)]
    pub verbose: bool,
}

/// Arguments of `gpuhook cdi validate`.
#[derive(Debug, Clone, Args)]
pub struct ValidateArgs {
    /// Spec file (.json or .yaml)
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
}

pub(super) fn run(command: &CdiCommand, config: &Config) -> Result<(), CliError> {
    match command {
        CdiCommand::Generate(args) => generate::run(args, config),
        CdiCommand::Refresh(args) => refresh::run(args, config),
        CdiCommand::List(args) => list(args, config),
        CdiCommand::Validate(args) => validate(args),
    }
}

fn list(args: &ListArgs, config: &Config) -> Result<(), CliError> {
    let dirs: &[PathBuf] = if args.spec_dirs.is_empty() {
        &config.cdi_spec_dirs
    } else {
        &args.spec_dirs
    };
    let registry = gpuhook_cdi::Registry::load(dirs);
    for e in &registry.errors {
        if !conflicts::is_conflict_error(&registry, &e.path, &e.message) {
            eprintln!("gpuhook: warning: {e}");
        }
    }
    for group in registry.conflict_groups() {
        eprintln!("gpuhook: {}", conflicts::explain(&group));
    }
    let mut out = String::new();
    for (name, dev) in &registry.devices {
        if args.verbose {
            out.push_str(&format!("{name}\t{}\n", dev.spec.path.display()));
        } else {
            out.push_str(name);
            out.push('\n');
        }
    }
    print_stdout(&out)?;
    let shown: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    if registry.devices.is_empty() {
        if !registry.errors.is_empty() {
            return Err(CdiCliError::NothingListed {
                dirs: shown.join(", "),
                problems: registry.errors.len(),
            }
            .into());
        }
        eprintln!("gpuhook: no CDI specs found in {}", shown.join(", "));
    }
    Ok(())
}

fn print_stdout(text: &str) -> Result<(), CliError> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(|error| CliError::Stdout { error })
}

fn validate(args: &ValidateArgs) -> Result<(), CliError> {
    let file = &args.file;
    let bytes = gpuhook_cdi::read_spec_file(file)?;
    let format = gpuhook_cdi::Format::from_path(file);
    if format.is_none() {
        eprintln!(
            "gpuhook: warning: {}: runtimes load only *.json and *.yaml spec files; this one would be ignored",
            file.display()
        );
    }
    match gpuhook_cdi::validate_bytes(&bytes, format) {
        Ok(spec) => {
            print_stdout(&format!(
                "{}: valid CDI spec: kind {}, cdiVersion {}, {} devices\n",
                file.display(),
                spec.kind,
                spec.cdi_version,
                spec.devices.len()
            ))?;
            Ok(())
        }
        Err(errors) => {
            for e in &errors {
                let at = if e.path.is_empty() {
                    "(document)"
                } else {
                    e.path.as_str()
                };
                eprintln!("{}: {at}: {}", file.display(), e.message);
            }
            Err(CdiCliError::InvalidSpec {
                file: file.clone(),
                errors: errors.len(),
            }
            .into())
        }
    }
}

/// `path` made absolute and canonical; it must exist.
fn canonical_dir(what: &'static str, path: &Path) -> Result<PathBuf, CliError> {
    let canonical = path
        .canonicalize()
        .map_err(|error| CdiCliError::Unresolvable {
            what,
            path: path.to_path_buf(),
            error,
        })?;
    if !canonical.is_dir() {
        return Err(CdiCliError::NotADirectory {
            what,
            path: path.to_path_buf(),
        }
        .into());
    }
    Ok(canonical)
}
