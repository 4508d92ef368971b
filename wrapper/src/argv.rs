//! Just enough of runc's command line: the global options, the command, and the bundle.
//!
//! The wrapper must never reinterpret arguments it does not understand: it only needs the
//! command (to decide whether to touch the bundle), `--bundle` of `create`/`run`, and the global
//! `--log`/`--log-format` (so its own errors reach the file containerd shows the user). runc uses
//! Go's flag syntax: one or two dashes, `--flag=value` or `--flag value`, `--` ends the flags,
//! and (urfave/cli v1) a command's flags may also follow its positional container id.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use thiserror::Error;

/// runc global options that take a value.
const GLOBAL_VALUE_FLAGS: &[&str] = &["root", "log", "log-format", "criu", "rootless"];
/// runc global options without a value (`--debug=false` is also accepted).
const GLOBAL_BOOL_FLAGS: &[&str] = &["debug", "systemd-cgroup", "help", "h", "version", "v"];
/// Options of `create`/`run` other than `--bundle` that take a value.
const CREATE_VALUE_FLAGS: &[&str] = &["console-socket", "pid-file", "preserve-fds"];

/// Commands whose bundle the wrapper edits. containerd uses `create`; `run` is create + start.
const INTERCEPTED: &[&str] = &["create", "run"];

/// Errors reading runc's command line (only for commands the wrapper intercepts).
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ArgvError {
    #[error("runc option {flag} needs a value")]
    MissingValue { flag: String },
    /// An unknown global option might swallow the command name: refuse rather than guess,
    /// because guessing wrong would start a GPU container without its GPUs.
    #[error(
        "unknown runc global option {flag}: gpuhook-runtime cannot tell whether it takes a value, \
         so it cannot find the command; write it as {flag}=VALUE (or report this runc version)"
    )]
    UnknownGlobalFlag { flag: String },
}

/// Whether the wrapper edits the bundle before exec'ing the runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Intercept {
    /// `create`/`run`: edit `<bundle>/config.json` (bundle defaults to the working directory).
    Bundle { command: String, bundle: PathBuf },
    /// Anything else: exec straight through.
    PassThrough,
}

/// What the wrapper read from runc's argv (`argv[0]` is the program).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RuncArgs {
    /// `--log FILE`: where runc (and our errors) log.
    pub log: Option<PathBuf>,
    /// `--log-format text|json` (runc's default is text).
    pub log_format: Option<String>,
    /// `--root DIR`.
    pub root: Option<PathBuf>,
    /// The command (`create`, `start`, ...), if any.
    pub command: Option<String>,
    /// Index of the command in argv.
    pub command_index: Option<usize>,
    /// `--bundle` of `create`/`run` as given (None: not given).
    pub bundle: Option<PathBuf>,
    /// The container id of `create`/`run`: the first argument after the command that is neither
    /// a flag nor a flag's value (None when there is none).
    pub container_id: Option<String>,
}

impl RuncArgs {
    /// What to do with this invocation; a missing `--bundle` means the working directory.
    pub fn intercept(&self) -> Intercept {
        match self.command.as_deref() {
            Some(c) if INTERCEPTED.contains(&c) => Intercept::Bundle {
                command: c.to_string(),
                bundle: self.bundle.clone().unwrap_or_else(|| PathBuf::from(".")),
            },
            _ => Intercept::PassThrough,
        }
    }

    /// True when the log file should get JSON lines (containerd's shim passes `--log-format json`).
    pub fn log_is_json(&self) -> bool {
        self.log_format.as_deref() == Some("json")
    }
}

/// A Go-style flag: `-name`, `--name`, optionally `=value`. None for positionals, `-` and `--`.
fn split_flag(arg: &OsStr) -> Option<(&str, Option<&OsStr>)> {
    let bytes = arg.as_bytes();
    if bytes.len() < 2 || bytes[0] != b'-' || bytes == b"--" {
        return None;
    }
    let body = if bytes[1] == b'-' {
        &bytes[2..]
    } else {
        &bytes[1..]
    };
    if body.is_empty() || body[0] == b'-' {
        return None;
    }
    let (name, value) = match body.iter().position(|b| *b == b'=') {
        Some(i) => (&body[..i], Some(&body[i + 1..])),
        None => (body, None),
    };
    let name = std::str::from_utf8(name).ok()?;
    let value = value.map(OsStr::from_bytes);
    Some((name, value))
}

/// Parses `argv` (with `argv[0]`). Errors only where a wrong guess could skip GPU injection.
pub fn parse(argv: &[OsString]) -> Result<RuncArgs, ArgvError> {
    let mut out = RuncArgs::default();
    let mut i = 1;
    while i < argv.len() {
        let arg = &argv[i];
        if arg == "--" {
            i += 1;
            break;
        }
        let Some((name, inline)) = split_flag(arg) else {
            break;
        };
        let flag = format!("--{name}");
        if GLOBAL_BOOL_FLAGS.contains(&name) {
            i += 1;
            continue;
        }
        let value: OsString = if GLOBAL_VALUE_FLAGS.contains(&name) {
            match inline {
                Some(v) => v.to_os_string(),
                None => match argv.get(i + 1) {
                    Some(v) => {
                        i += 1;
                        v.clone()
                    }
                    // `runc --root`: runc itself will complain; there is no command.
                    None => return Ok(out),
                },
            }
        } else {
            if inline.is_none()
                && argv[i + 1..]
                    .iter()
                    .any(|a| INTERCEPTED.iter().any(|c| a == c))
            {
                return Err(ArgvError::UnknownGlobalFlag { flag });
            }
            tracing::warn!(flag = %flag, "unknown runc global option, assumed to take no value");
            i += 1;
            continue;
        };
        match name {
            "log" => out.log = Some(PathBuf::from(value)),
            "log-format" => out.log_format = Some(value.to_string_lossy().into_owned()),
            "root" => out.root = Some(PathBuf::from(value)),
            _ => {}
        }
        i += 1;
    }
    let Some(cmd) = argv.get(i) else {
        return Ok(out);
    };
    out.command = Some(cmd.to_string_lossy().into_owned());
    out.command_index = Some(i);
    if out
        .command
        .as_deref()
        .is_some_and(|c| INTERCEPTED.contains(&c))
    {
        (out.bundle, out.container_id) = find_bundle(&argv[i + 1..])?;
    }
    Ok(out)
}

/// `--bundle`/`-b` among a command's arguments (the last one wins, as with Go's flag package),
/// and the first positional argument (the container id).
fn find_bundle(args: &[OsString]) -> Result<(Option<PathBuf>, Option<String>), ArgvError> {
    let mut bundle = None;
    let mut id = None;
    let mut i = 0;
    while i < args.len() {
        if args[i] == "--" {
            if id.is_none() {
                id = args.get(i + 1).map(|a| a.to_string_lossy().into_owned());
            }
            break;
        }
        let flag = split_flag(&args[i]);
        if flag.is_none() && id.is_none() {
            id = Some(args[i].to_string_lossy().into_owned());
        }
        if let Some((name, inline)) = flag {
            let is_bundle = name == "bundle" || name == "b";
            if is_bundle || CREATE_VALUE_FLAGS.contains(&name) {
                let value = match inline {
                    Some(v) => v.to_os_string(),
                    None => {
                        i += 1;
                        args.get(i)
                            .cloned()
                            .ok_or_else(|| ArgvError::MissingValue {
                                flag: format!("--{name}"),
                            })?
                    }
                };
                if is_bundle {
                    bundle = Some(PathBuf::from(value));
                }
            }
        }
        i += 1;
    }
    Ok((bundle, id))
}

#[cfg(test)]
#[path = "argv_tests.rs"]
mod tests;
