//! The errors of the `gpuhook` command line.
//!
//! Every message is the one line `gpuhook: error: ...` shows, naming the problem and the fix. A
//! library error passes through unchanged (`transparent`: it already says its cause and fix); a
//! failure given context here carries its cause in the field `error`, written into the message
//! and deliberately not a `#[source]`, so [`one_line`] prints each cause once.

use std::path::PathBuf;

use super::cdi::FlagsError;
use crate::config::ConfigError;
use crate::logging::LoggingError;
use crate::prestart::PrestartError;

/// A failed `gpuhook` command.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Logging(#[from] LoggingError),
    /// Boxed, as the largest: a `Result` stays small on the success path.
    #[error(transparent)]
    Prestart(Box<PrestartError>),
    #[error(transparent)]
    Flags(#[from] FlagsError),
    #[error(transparent)]
    Cdi(#[from] gpuhook_cdi::CdiError),
    #[error(transparent)]
    Node(#[from] gpuhook_node::NodeError),
    #[error(transparent)]
    Inject(#[from] gpuhook_inject::InjectError),
    #[error(transparent)]
    Configure(#[from] gpuhook_containerd::ConfigureError),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("cannot write to stdout: {error}")]
    Stdout { error: std::io::Error },
    #[error("cannot encode the report: {error}")]
    EncodeReport { error: serde_json::Error },
    #[error("{n} check(s) failed; each finding above says how to fix it")]
    ChecksFailed { n: usize },
    /// The container's user cannot use an MPS share it gets (the message says why and the fix).
    #[error(transparent)]
    Mps(#[from] gpuhook_request::MpsAccessError),
    #[error("container spec {}: {error}", path.display())]
    ParseContainerSpec {
        path: PathBuf,
        error: serde_json::Error,
    },
    #[error("cannot read container spec {}: {error}", path.display())]
    ReadContainerSpec {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("--dev-root {} is not an absolute path", path.display())]
    DevRootNotAbsolute { path: PathBuf },
    #[error(
        "--dev-char-path {} must be an absolute path ending in /char (e.g. /dev/char): the \
         links point at ../<node>",
        path.display()
    )]
    DevCharPath { path: PathBuf },
    #[error("listing NVIDIA device nodes in {}: {error}", dev.display())]
    ListDevNodes {
        dev: PathBuf,
        error: gpuhook_inject::InjectError,
    },
    #[error("creating links in {}/char: {error}", dev.display())]
    CreateDevLinks {
        dev: PathBuf,
        error: gpuhook_inject::InjectError,
    },
    /// Boxed too (it is as large as the prestart error).
    #[error(transparent)]
    CdiCli(Box<CdiCliError>),
}

impl From<PrestartError> for CliError {
    fn from(e: PrestartError) -> Self {
        CliError::Prestart(Box::new(e))
    }
}

impl From<CdiCliError> for CliError {
    fn from(e: CdiCliError) -> Self {
        CliError::CdiCli(Box::new(e))
    }
}

/// A failed `gpuhook cdi ...` command.
#[derive(Debug, thiserror::Error)]
pub enum CdiCliError {
    #[error(
        "{what} {} does not exist or cannot be resolved (pass an existing directory): {error}",
        path.display()
    )]
    Unresolvable {
        what: &'static str,
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{what} {} is not a directory", path.display())]
    NotADirectory { what: &'static str, path: PathBuf },
    /// `dirs`: the spec directories, comma-separated.
    #[error(
        "no CDI device could be listed from {dirs}: {problems} problem(s) reported above; fix or \
         remove the broken spec files"
    )]
    NothingListed { dirs: String, problems: usize },
    #[error(
        "{} is not a valid CDI spec: {errors} error(s) (listed above with their JSON paths); fix \
         them or regenerate it with `gpuhook cdi generate`",
        file.display()
    )]
    InvalidSpec { file: PathBuf, errors: usize },
    #[error(
        "--format {format} does not match the extension of {}: runtimes read *.json as JSON and \
         *.yaml as YAML; rename the file or drop --format",
        path.display()
    )]
    FormatMismatch { format: &'static str, path: PathBuf },
    #[error(
        "--gpuhook-path {} is not absolute: hooks run with the runtime's working directory, pass \
         the absolute host path of the gpuhook binary",
        path.display()
    )]
    RelativeGpuhookPath { path: PathBuf },
    #[error("cannot find the path of the running gpuhook binary; pass --gpuhook-path: {error}")]
    CurrentExe { error: std::io::Error },
    #[error(
        "the node has no GPU or MIG device to describe: {reason}; no spec printed (a CDI spec \
         needs a device)"
    )]
    NothingToPrint { reason: String },
    /// `nvml`: discovery's NVML warnings, `; `-separated.
    #[error(
        "{nvml}; a spec made without NVML lacks MIG devices: fix NVML (or point --nvml-lib at a \
         working libnvidia-ml.so.1), or pass --allow-procfs-fallback to describe full GPUs from \
         /proc/driver/nvidia only"
    )]
    NvmlRequired { nvml: String },
    #[error("cannot read the node state under {}: {error}", driver_root.display())]
    NodeState {
        driver_root: PathBuf,
        error: gpuhook_node::fingerprint::FingerprintError,
    },
    /// Several files in one directory: `files` their paths, comma-separated.
    #[error(
        "{count} spec files in {} define devices of {kind} ({files}): runtimes drop every device \
         defined twice in one directory; remove all but one of them, then run `gpuhook cdi \
         generate` again",
        dir.display()
    )]
    Rivals {
        count: usize,
        dir: PathBuf,
        kind: String,
        files: String,
    },
    /// `names`: some of the shared device names.
    #[error(
        "{} already defines {shared} of the same devices ({names}) in {}: runtimes drop every \
         device that two files of one directory define. Write to that file instead (--output {}), \
         pass the directory (--output {}; with --force to take over a file of another tool), or \
         remove it",
        rival.display(),
        dir.display(),
        rival.display(),
        dir.display()
    )]
    NamedRival {
        rival: PathBuf,
        shared: usize,
        names: String,
        dir: PathBuf,
    },
    /// `reason`: why the rival is not gpuhook's.
    #[error(
        "{} already defines {shared} of the same devices ({names}) in {}, and {reason}: runtimes \
         drop every device that two files of one directory define, so writing {} beside it would \
         leave no GPU usable. Pass --force to replace {} with gpuhook's spec (and stop the tool \
         that writes it, e.g. `systemctl disable --now nvidia-cdi-refresh.path`), remove it, or \
         write to another spec directory with --output (a later directory wins: /var/run/cdi \
         over /etc/cdi)",
        rival.display(),
        dir.display(),
        out.display(),
        rival.display()
    )]
    ForeignRival {
        rival: PathBuf,
        shared: usize,
        names: Box<str>,
        dir: PathBuf,
        reason: Box<str>,
        out: PathBuf,
    },
}

/// The error and its causes on one line (`outer: inner: root`), as `anyhow` writes a chain with
/// `{:#}`; line breaks inside a message become spaces.
pub fn one_line(e: &(dyn std::error::Error + 'static)) -> String {
    let mut line = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        line.push_str(": ");
        line.push_str(&c.to_string());
        cause = c.source();
    }
    line.replace(['\n', '\r'], " ")
}
