//! Parsing the two argvs that are run most often without building clap's whole command tree:
//! the prestart hook's (every container start, GPU or not) and `cdi generate`'s (every spec
//! refresh, where building the tree costs more than the rest of the start-up). Each only ever
//! returns what clap would; anything else is left to clap, which then prints exactly what it
//! always printed.

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;

use super::{CdiCommand, Cli, Command, GenerateArgs, PrestartArgs};
use crate::config::CONFIG_ENV;
use crate::logging::{self, LogFormat, LogLevel};

/// The argv a runtime passes to the prestart hook on *every* container start (`gpuhook prestart`
/// or `gpuhook prestart --config FILE`), parsed without building clap's whole command tree: the
/// hook's cost is paid by every container, GPU or not. Anything else (help, other flags) returns
/// `None` and goes through clap. `--config` after `prestart` becomes the top-level config, which
/// is what `prestart --config` means (that file's settings, logging included).
pub fn prestart_fast_path(argv: &[OsString]) -> Option<Cli> {
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

/// `gpuhook [TOP-LEVEL OPTIONS] cdi generate [ARGS]` parsed with the `generate` subcommand's
/// own clap command instead of the whole tree (which costs more than the rest of a spec refresh's
/// start-up): the top-level options (`--config`, `--log-level`, `--log-file`, `--log-format`,
/// each once, as `--opt VALUE` or `--opt=VALUE`) are read here, and `generate`'s arguments go
/// through the same [`GenerateArgs`] definition, environment defaults included (the common
/// ones without clap at all, see `fast_generate`). It only ever accepts what the full parser
/// accepts: anything else (help, a usage error, another command, an unknown or odd top-level
/// option, an environment value clap would refuse) returns `None`, and the full parser prints
/// exactly what it always printed. `env` reads an environment
/// variable (the top-level options' defaults).
pub fn cdi_generate_fast_path(
    argv: &[OsString],
    env: impl Fn(&str) -> Option<OsString>,
) -> Option<Cli> {
    let mut top = TopLevel::default();
    let mut rest = argv.get(1..)?;
    loop {
        match rest {
            [cdi, generate, ..] if cdi == "cdi" && generate == "generate" => break,
            [opt, tail @ ..] => rest = top.take(opt, tail)?,
            [] => return None,
        }
    }
    // Environment defaults of the top-level options, as clap applies them (an empty or unknown
    // value is clap's error to report).
    if let (None, Some(v)) = (&top.config, env(CONFIG_ENV)) {
        top.config = Some(non_empty_path(v)?);
    }
    if let (None, Some(v)) = (&top.log_format, env(logging::LOG_FORMAT_ENV)) {
        top.log_format = Some(value_enum(&v)?);
    }
    let generate_args = rest.get(2..)?;
    let args = match super::fast_generate::generate_args(generate_args, &env) {
        Some(args) => args,
        None => generate_with_clap(generate_args)?,
    };
    Some(Cli {
        config: top.config,
        log_level: top.log_level,
        log_file: top.log_file,
        log_format: top.log_format,
        command: Command::Cdi(CdiCommand::Generate(Box::new(args))),
    })
}

/// `generate`'s arguments through its own clap command (not the whole tree).
fn generate_with_clap(generate_args: &[OsString]) -> Option<GenerateArgs> {
    let mut generate = <GenerateArgs as clap::Args>::augment_args(clap::Command::new("generate"));
    let mut matches = generate
        .try_get_matches_from_mut(
            std::iter::once("generate".into()).chain(generate_args.iter().cloned()),
        )
        .ok()?;
    <GenerateArgs as clap::FromArgMatches>::from_arg_matches_mut(&mut matches).ok()
}

/// The top-level options of [`Cli`] read by [`cdi_generate_fast_path`].
#[derive(Default)]
struct TopLevel {
    config: Option<PathBuf>,
    log_level: Option<LogLevel>,
    log_file: Option<PathBuf>,
    log_format: Option<LogFormat>,
}

impl TopLevel {
    /// Takes the option `opt` (its value inline or first in `tail`); returns what follows it.
    /// `None` for anything clap might read otherwise: an unknown or repeated option, a missing,
    /// empty or dash-leading value, a value that is not one of the enum's names.
    fn take<'a>(&mut self, opt: &OsStr, tail: &'a [OsString]) -> Option<&'a [OsString]> {
        let opt = opt.to_str()?;
        let (name, value, tail) = match opt.split_once('=') {
            Some((name, value)) => (name, OsStr::new(value), tail),
            None => {
                let (value, tail) = tail.split_first()?;
                (opt, value.as_os_str(), tail)
            }
        };
        if value.is_empty() || value.as_encoded_bytes().starts_with(b"-") {
            return None;
        }
        match name {
            "--config" if self.config.is_none() => self.config = Some(PathBuf::from(value)),
            "--log-level" if self.log_level.is_none() => self.log_level = Some(value_enum(value)?),
            "--log-file" if self.log_file.is_none() => self.log_file = Some(PathBuf::from(value)),
            "--log-format" if self.log_format.is_none() => {
                self.log_format = Some(value_enum(value)?)
            }
            _ => return None,
        }
        Some(tail)
    }
}

/// A path value clap accepts (not empty).
fn non_empty_path(v: OsString) -> Option<PathBuf> {
    (!v.is_empty()).then(|| PathBuf::from(v))
}

/// A `value_enum` value as clap matches it (exact name or alias, case-sensitive).
fn value_enum<E: clap::ValueEnum>(v: &OsStr) -> Option<E> {
    E::from_str(v.to_str()?, false).ok()
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;

    use clap::Parser;

    use super::*;
    use crate::config::CONFIG_ENV;

    fn argv(args: &[&str]) -> Vec<OsString> {
        std::iter::once("gpuhook")
            .chain(args.iter().copied())
            .map(OsString::from)
            .collect()
    }

    /// The fast path's `Cli`, checked against clap's full parse of the same argv.
    fn fast(args: &[&str]) -> Option<Cli> {
        let argv = argv(args);
        let cli = cdi_generate_fast_path(&argv, |n| std::env::var_os(n))?;
        let full = Cli::try_parse_from(&argv)
            .unwrap_or_else(|e| panic!("fast path accepted {args:?}, clap refuses it: {e}"));
        assert_eq!(format!("{cli:?}"), format!("{full:?}"), "{args:?}");
        Some(cli)
    }

    #[test]
    fn cdi_generate_takes_the_fast_path_with_the_full_parsers_result() {
        for args in [
            &["cdi", "generate"][..],
            &[
                "--log-level",
                "debug",
                "--log-format",
                "json",
                "cdi",
                "generate",
                "--driver-root",
                "/drv",
                "--output",
                "/o/x.json",
                "--inventory-cache",
                "/i.json",
            ],
            &[
                "--config=/etc/g.toml",
                "--log-file",
                "/l",
                "--log-level=trace",
                "cdi",
                "generate",
                "-o",
                "-",
                "--format",
                "YAML",
                "--device-name-strategy",
                "index,type-index",
                "--vendor",
                "example.com",
                "--class",
                "gpu",
                "--no-inventory-cache",
                "--force",
                "--mode",
                "management",
                "--no-all-device",
                "--library-search-path",
                "/x",
            ],
            &[
                "cdi",
                "generate",
                "--device-name-strategy=uuid",
                "--cdi-vendor",
                "a.b",
                "--allow-procfs-fallback",
                "--fail-on-empty",
                "--gpuhook-path",
                "/usr/bin/gpuhook",
            ],
        ] {
            assert!(fast(args).is_some(), "{args:?} must take the fast path");
        }
    }

    #[test]
    fn anything_else_goes_to_the_full_parser() {
        for args in [
            &[][..],
            &["cdi"],
            &["cdi", "list"],
            &["prestart"],
            &["--version", "cdi", "generate"],
            &["cdi", "generate", "--help"],
            &["cdi", "generate", "-h"],
            &["cdi", "generate", "--bogus"],
            &["cdi", "generate", "--format", "toml"],
            &["cdi", "generate", "--vendor", "bad vendor"],
            &[
                "cdi",
                "generate",
                "--inventory-cache",
                "/x",
                "--no-inventory-cache",
            ],
            &["cdi", "generate", "extra"],
            &["--log-level", "loud", "cdi", "generate"],
            &["--log-level", "DEBUG", "cdi", "generate"],
            &[
                "--log-level",
                "debug",
                "--log-level",
                "info",
                "cdi",
                "generate",
            ],
            &["--log-file", "cdi", "generate"],
            &["--config", "", "cdi", "generate"],
            &["--config=", "cdi", "generate"],
            &["--config", "-x", "cdi", "generate"],
            &["--unknown", "x", "cdi", "generate"],
            &["-h", "cdi", "generate"],
            &["cdi", "--log-level", "debug", "generate"],
            &["cdi", "generate", "--log-level", "debug"],
        ] {
            assert!(fast(args).is_none(), "{args:?} must go to clap");
        }
    }

    #[test]
    fn top_level_environment_defaults_apply_as_with_clap() {
        let env = |config: Option<&'static str>, format: Option<&'static str>| {
            move |name: &str| match name {
                CONFIG_ENV => config.map(OsString::from),
                logging::LOG_FORMAT_ENV => format.map(OsString::from),
                _ => None,
            }
        };
        let run = |args: &[&str], e| cdi_generate_fast_path(&argv(args), e);
        let cli = run(&["cdi", "generate"], env(Some("/c.toml"), Some("json"))).expect("fast path");
        assert_eq!(cli.config, Some(PathBuf::from("/c.toml")));
        assert_eq!(cli.log_format, Some(LogFormat::Json));
        // The command line wins, and then the environment value is not looked at.
        let args = [
            "--config",
            "/d.toml",
            "--log-format",
            "json",
            "cdi",
            "generate",
        ];
        let cli = run(&args, env(Some("/c.toml"), Some("nonsense"))).expect("fast path");
        assert_eq!(cli.config, Some(PathBuf::from("/d.toml")));
        assert_eq!(cli.log_format, Some(LogFormat::Json));
        // Values clap refuses (an unknown format, an empty path) are clap's to report.
        assert!(run(&["cdi", "generate"], env(Some("/c.toml"), Some("nonsense"))).is_none());
        assert!(run(&["cdi", "generate"], env(Some(""), None)).is_none());
    }
}
