//! `gpuhook` called as `nvidia-container-runtime-hook`: the hook `docker run --gpus` runs.
//!
//! dockerd's `--gpus` support (moby `daemon/nvidia_linux.go`, `devices_nvidia_linux.go` in later
//! releases) looks `nvidia-container-runtime-hook` up on *its* `PATH`, puts the request in the
//! container's env (`NVIDIA_VISIBLE_DEVICES`: `all` for `--gpus all`, `0,1,…,N-1` for
//! `--gpus N`, the ids of `--gpus device=…`; `NVIDIA_DRIVER_CAPABILITIES` only when
//! `capabilities=` names driver capabilities) and adds the prestart hook
//! `{"path": <found>, "args": ["nvidia-container-runtime-hook", "prestart"], "env": <dockerd's>}`.
//! A link of that name to `gpuhook` is therefore all Docker needs: called by that name,
//! `gpuhook` parses NVIDIA's hook command line (`cmd/nvidia-container-runtime-hook/main.go`, Go's
//! `flag` package) and runs exactly `gpuhook prestart`.
//!
//! NVIDIA's grammar: flags `-config FILE`, `-debug`, `-version` (one or two dashes, `-f=v` or
//! `-f v`, `-debug=BOOL`), parsing stops at the first non-flag or `--`; then one command:
//! `prestart` (the hook), `poststart`/`poststop` (no-ops, exit 0). No command or an unknown one
//! prints the usage and exits 2, as NVIDIA's does. An unknown flag is an error naming it (exit
//! 2): runc then refuses to start the container, so no GPU container ever starts without its
//! devices because of a flag we do not know. `-config` names gpuhook's config file (NVIDIA's
//! `config.toml` is read too, see [`crate::config`]); without it `GPUHOOK_CONFIG` or
//! `/etc/gpuhook/config.toml` is used, as for `gpuhook prestart`. `-debug` sets the log level to
//! `debug`.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use super::{Cli, Command, PrestartArgs};
use crate::config::CONFIG_ENV;
use crate::logging::{LogFormat, LogLevel};

pub use gpuhook_containerd::docker::NVIDIA_HOOK_NAME;

/// Exit status of a usage error (Go's `flag` package and NVIDIA's hook use 2).
pub const EXIT_USAGE: u8 = 2;

/// What an `nvidia-container-runtime-hook` command line asks for.
#[derive(Debug)]
pub enum HookCall {
    /// Run `gpuhook prestart` with this command line.
    Prestart(Box<Cli>),
    /// Print `stdout` and `stderr`, exit with `code` (no-op stages, version, help, usage errors).
    Exit {
        code: u8,
        stdout: String,
        stderr: String,
    },
}

/// `Some` when `argv[0]`'s file name is `nvidia-container-runtime-hook`; `env` reads an
/// environment variable (`GPUHOOK_CONFIG`, the log format's).
pub fn from_argv(argv: &[OsString], env: impl Fn(&str) -> Option<OsString>) -> Option<HookCall> {
    let name = Path::new(argv.first()?).file_name()?;
    (name == NVIDIA_HOOK_NAME).then(|| parse(argv.get(1..).unwrap_or_default(), env))
}

/// NVIDIA's hook flags, as parsed so far.
#[derive(Default)]
struct Flags {
    config: Option<PathBuf>,
    debug: bool,
    version: bool,
}

fn usage() -> String {
    format!(
        "Usage of {NVIDIA_HOOK_NAME} (gpuhook {}):\n  \
         -config FILE\n        gpuhook's config file (NVIDIA's config.toml is read too) \
         [default: ${CONFIG_ENV} or /etc/gpuhook/config.toml]\n  \
         -debug\n        log at debug level\n  \
         -version\n        print the version\n\nCommands:\n  \
         prestart\n        run the prestart hook (as `gpuhook prestart`)\n  \
         poststart\n        no-op\n  poststop\n        no-op\n",
        env!("CARGO_PKG_VERSION")
    )
}

fn usage_error(message: String) -> HookCall {
    HookCall::Exit {
        code: EXIT_USAGE,
        stdout: String::new(),
        stderr: format!("{NVIDIA_HOOK_NAME}: {message}\n{}", usage()),
    }
}

/// Parses the arguments after `argv[0]`.
fn parse(args: &[OsString], env: impl Fn(&str) -> Option<OsString>) -> HookCall {
    let mut flags = Flags::default();
    let mut rest = args;
    while let Some((arg, tail)) = rest.split_first() {
        let Some(text) = arg.to_str() else {
            return usage_error(format!("argument {arg:?} is not UTF-8"));
        };
        if text == "--" {
            rest = tail;
            break;
        }
        let Some(flag) = text.strip_prefix("--").or_else(|| text.strip_prefix('-')) else {
            break;
        };
        if flag.is_empty() || flag.starts_with('-') || flag.starts_with('=') {
            return usage_error(format!("bad flag syntax: {text}"));
        }
        match take_flag(&mut flags, flag, tail) {
            Ok(next) => rest = next,
            Err(call) => return call,
        }
    }
    if flags.version {
        return HookCall::Exit {
            code: 0,
            stdout: format!(
                "gpuhook {} as {NVIDIA_HOOK_NAME}\n",
                env!("CARGO_PKG_VERSION")
            ),
            stderr: String::new(),
        };
    }
    let Some((command, extra)) = rest.split_first() else {
        return usage_error("no command given (prestart, poststart or poststop)".into());
    };
    match command.to_str() {
        Some("prestart") if extra.is_empty() => HookCall::Prestart(Box::new(prestart(flags, env))),
        Some("prestart") => usage_error(format!(
            "unexpected argument {:?} after `prestart`; flags go before the command",
            extra[0]
        )),
        Some("poststart" | "poststop") => HookCall::Exit {
            code: 0,
            stdout: String::new(),
            stderr: String::new(),
        },
        _ => usage_error(format!(
            "unknown command {command:?} (prestart, poststart or poststop)"
        )),
    }
}

/// Takes one flag (`name` or `name=value`, dashes stripped); returns what follows it.
fn take_flag<'a>(
    flags: &mut Flags,
    flag: &str,
    tail: &'a [OsString],
) -> Result<&'a [OsString], HookCall> {
    let (name, inline) = match flag.split_once('=') {
        Some((n, v)) => (n, Some(v)),
        None => (flag, None),
    };
    match name {
        "debug" | "version" => {
            let on = match inline.map(go_bool) {
                None => true,
                Some(Some(b)) => b,
                Some(None) => {
                    return Err(usage_error(format!(
                        "invalid boolean value {:?} for -{name}",
                        inline.unwrap_or_default()
                    )))
                }
            };
            if name == "debug" {
                flags.debug = on;
            } else {
                flags.version = on;
            }
            Ok(tail)
        }
        "config" => {
            let (value, next) = match inline {
                Some(v) => (OsStr::new(v).to_os_string(), tail),
                None => match tail.split_first() {
                    Some((v, next)) => (v.clone(), next),
                    None => return Err(usage_error("flag needs an argument: -config".into())),
                },
            };
            if value.is_empty() {
                return Err(usage_error("-config needs a file name".into()));
            }
            flags.config = Some(PathBuf::from(value));
            Ok(next)
        }
        "h" | "help" => Err(HookCall::Exit {
            code: 0,
            stdout: String::new(),
            stderr: usage(),
        }),
        _ => Err(usage_error(format!(
            "flag provided but not defined: -{name} (the container is not started: \
             gpuhook accepts NVIDIA's -config, -debug and -version)"
        ))),
    }
}

/// Go's `strconv.ParseBool`, which `flag` uses for `-debug=VALUE`.
fn go_bool(v: &str) -> Option<bool> {
    match v {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

/// The `gpuhook prestart` command line these flags mean.
fn prestart(flags: Flags, env: impl Fn(&str) -> Option<OsString>) -> Cli {
    let config = flags
        .config
        .or_else(|| env(CONFIG_ENV).filter(|v| !v.is_empty()).map(PathBuf::from));
    Cli {
        config,
        log_level: flags.debug.then_some(LogLevel::Debug),
        log_file: None,
        log_format: LogFormat::from_env(),
        command: Command::Prestart(PrestartArgs {
            state: None,
            config: None,
        }),
    }
}

#[cfg(test)]
#[path = "nvidia_hook_tests.rs"]
mod tests;
