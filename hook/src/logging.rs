//! Where gpuhook writes its diagnostics: a log file (appended) or stderr — never stdout, which the
//! runtime may read from a hook. One structured line per decision is the caller's job;
//! [`Decision`] makes that one call.

mod syslog;

pub use syslog::{DecisionSyslog, DECISION_TARGET, SYSLOG_SOCKET};

use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::Deserialize;
use tracing::Subscriber;
use tracing_subscriber::filter::LevelFilter;

/// Verbosity.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    Error,
    Warn,
    #[default]
    Info,
    Debug,
    Trace,
}

/// Line format.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// One JSON object per line (for log collectors).
    Json,
    /// `timestamp LEVEL target: message key=value ...` (`compact` is the old name).
    #[default]
    #[value(name = "text", alias = "compact")]
    #[serde(rename = "text", alias = "compact")]
    Compact,
}

/// The environment variable that sets the log format of every gpuhook binary (`json` or
/// `text`); a command-line `--log-format` wins over it, and it wins over the config file.
pub const LOG_FORMAT_ENV: &str = "GPUHOOK_LOG_FORMAT";

impl LogFormat {
    /// `json`, `text` (or `compact`); anything else is `None`.
    pub fn parse(s: &str) -> Option<LogFormat> {
        match s.trim().to_ascii_lowercase().as_str() {
            "json" => Some(LogFormat::Json),
            "text" | "compact" => Some(LogFormat::Compact),
            _ => None,
        }
    }

    /// From [`LOG_FORMAT_ENV`], when set to a known format. Any other value is not an error
    /// (a hook or the runtime wrapper must not fail a container over its log format): the
    /// caller keeps its default (text), and the value is kept for one warning in the log, which
    /// [`init`] and the first [`Decision::log`] write (see [`warn_invalid_format`]).
    pub fn from_env() -> Option<LogFormat> {
        let value = std::env::var_os(LOG_FORMAT_ENV).filter(|v| !v.is_empty())?;
        let parsed = value.to_str().and_then(LogFormat::parse);
        if parsed.is_none() {
            let _ = INVALID_ENV_FORMAT.set(value.to_string_lossy().into_owned());
        }
        parsed
    }
}

/// An unknown [`LOG_FORMAT_ENV`] value [`LogFormat::from_env`] saw, not yet warned about.
static INVALID_ENV_FORMAT: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Warns, once per process, about an unknown [`LOG_FORMAT_ENV`] value, naming it and the
/// accepted ones. Through `tracing`, so into the log set up (file, runc's log, or stderr),
/// never stdout, and never into a container's own stderr (the wrapper's stderr during
/// `runc create` is the container's).
pub fn warn_invalid_format() {
    static WARNED: std::sync::Once = std::sync::Once::new();
    if let Some(value) = INVALID_ENV_FORMAT.get() {
        WARNED.call_once(|| {
            tracing::warn!(
                value = %value,
                accepted = "json|text",
                "{LOG_FORMAT_ENV}={value:?} is not a log format (accepted: json|text); logging \
                 as text"
            );
        });
    }
}

/// Colours only for a person watching: stderr is a terminal (never in files, journald or a
/// collector's pipe).
pub fn stderr_ansi() -> bool {
    std::io::IsTerminal::is_terminal(&std::io::stderr())
}

/// Where and how to log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogSettings {
    /// Appended to; stderr when `None`.
    pub file: Option<PathBuf>,
    pub level: LogLevel,
    pub format: LogFormat,
}

/// Why logging could not be set up.
///
/// The OS error is part of `Open`'s message (field `error`, deliberately not a `source`): the CLI
/// prints errors as a cause chain, which would repeat it.
#[derive(Debug, thiserror::Error)]
pub enum LoggingError {
    #[error("cannot open log file {}: {error} (fix log-file in the config or create its directory)", path.display())]
    Open {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("logging was already initialised")]
    AlreadyInitialised,
}

impl From<LogLevel> for LevelFilter {
    fn from(l: LogLevel) -> Self {
        match l {
            LogLevel::Error => LevelFilter::ERROR,
            LogLevel::Warn => LevelFilter::WARN,
            LogLevel::Info => LevelFilter::INFO,
            LogLevel::Debug => LevelFilter::DEBUG,
            LogLevel::Trace => LevelFilter::TRACE,
        }
    }
}

fn open_append(path: &Path) -> Result<std::fs::File, LoggingError> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o640)
        .open(path)
        .map_err(|error| LoggingError::Open {
            path: path.to_path_buf(),
            error,
        })
}

/// Builds the subscriber for `settings` without installing it (tests use it with
/// `tracing::subscriber::with_default`).
pub fn subscriber(
    settings: &LogSettings,
) -> Result<Box<dyn Subscriber + Send + Sync>, LoggingError> {
    let level = LevelFilter::from(settings.level);
    let builder = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_ansi(false)
        .with_target(true);
    Ok(match (&settings.file, settings.format) {
        (Some(path), LogFormat::Json) => Box::new(
            builder
                .json()
                .with_writer(Mutex::new(open_append(path)?))
                .finish(),
        ),
        (Some(path), LogFormat::Compact) => Box::new(
            builder
                .compact()
                .with_writer(Mutex::new(open_append(path)?))
                .finish(),
        ),
        (None, LogFormat::Json) => Box::new(builder.json().with_writer(std::io::stderr).finish()),
        (None, LogFormat::Compact) => Box::new(
            builder
                .with_ansi(stderr_ansi())
                .compact()
                .with_writer(std::io::stderr)
                .finish(),
        ),
    })
}

/// Installs the global subscriber. Call once, at the binary's boundary.
pub fn init(settings: &LogSettings) -> Result<(), LoggingError> {
    tracing::subscriber::set_global_default(subscriber(settings)?)
        .map_err(|_| LoggingError::AlreadyInitialised)?;
    warn_invalid_format();
    Ok(())
}

/// What a command decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Devices/files were (or will be) injected.
    Inject,
    /// Nothing to do for this container.
    Skip,
    /// Refused; nothing was injected.
    Refuse,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Inject => "inject",
            Outcome::Skip => "skip",
            Outcome::Refuse => "refuse",
        }
    }
}

/// One decision, logged as one structured line (target `gpuhook::decision`).
#[derive(Debug, Clone, Copy)]
pub struct Decision<'a> {
    /// `prestart`, `runtime create`, ...
    pub command: &'a str,
    pub outcome: Outcome,
    pub container: Option<&'a str>,
    /// The request source (`envvar`, `cdi-annotations`, ...).
    pub source: Option<&'a str>,
    /// Devices, comma-separated.
    pub devices: Option<&'a str>,
    /// Capabilities, comma-separated.
    pub capabilities: Option<&'a str>,
    /// Why (for skip/refuse), or a note.
    pub reason: Option<&'a str>,
}

impl<'a> Decision<'a> {
    pub fn new(command: &'a str, outcome: Outcome) -> Self {
        Decision {
            command,
            outcome,
            container: None,
            source: None,
            devices: None,
            capabilities: None,
            reason: None,
        }
    }

    /// Emits the line: `warn` for a refusal, `info` otherwise.
    pub fn log(&self) {
        // A wrapper that set up its own subscriber (runc's log) has not warned yet.
        warn_invalid_format();
        let Decision {
            command,
            outcome,
            container,
            source,
            devices,
            capabilities,
            reason,
        } = *self;
        let outcome = outcome.as_str();
        if self.outcome == Outcome::Refuse {
            tracing::warn!(target: "gpuhook::decision", command, outcome, container, source, devices, capabilities, reason, "decision");
        } else {
            tracing::info!(target: "gpuhook::decision", command, outcome, container, source, devices, capabilities, reason, "decision");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_file_gets_one_line_per_decision_appended() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gpuhook.log");
        std::fs::write(&path, "earlier line\n").unwrap();
        let settings = LogSettings {
            file: Some(path.clone()),
            level: LogLevel::Info,
            format: LogFormat::Json,
        };
        tracing::subscriber::with_default(subscriber(&settings).unwrap(), || {
            let mut d = Decision::new("prestart", Outcome::Inject);
            d.container = Some("abc");
            d.devices = Some("0,1");
            d.log();
            Decision::new("prestart", Outcome::Refuse).log();
            tracing::debug!("filtered out at info");
        });
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert_eq!(lines[0], "earlier line");
        let first: serde_json::Value = serde_json::from_str(lines[1]).unwrap();
        assert_eq!(first["target"], "gpuhook::decision");
        assert_eq!(first["level"], "INFO");
        assert_eq!(first["fields"]["outcome"], "inject");
        assert_eq!(first["fields"]["container"], "abc");
        assert_eq!(first["fields"]["devices"], "0,1");
        assert!(first["fields"].get("reason").is_none());
        let second: serde_json::Value = serde_json::from_str(lines[2]).unwrap();
        assert_eq!(second["level"], "WARN");
        assert_eq!(second["fields"]["outcome"], "refuse");
    }

    /// The OS error is part of the message (with the fix), and not repeated by a `{:#}` chain.
    #[test]
    fn an_unopenable_log_file_names_the_file_and_the_cause_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing-dir/gpuhook.log");
        let settings = LogSettings {
            file: Some(path.clone()),
            ..LogSettings::default()
        };
        let Err(err) = subscriber(&settings) else {
            panic!("{} opened", path.display());
        };
        let err = anyhow::Error::from(err);
        let line = format!("{err:#}");
        let os = std::io::Error::from_raw_os_error(libc::ENOENT).to_string();
        assert_eq!(line.matches(&os).count(), 1, "{line}");
        assert_eq!(line.matches(path.to_str().unwrap()).count(), 1, "{line}");
        assert!(line.contains("fix log-file in the config"), "{line}");
    }

    #[test]
    fn compact_format_and_level() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.log");
        let settings = LogSettings {
            file: Some(path.clone()),
            level: LogLevel::Debug,
            format: LogFormat::Compact,
        };
        tracing::subscriber::with_default(subscriber(&settings).unwrap(), || {
            tracing::debug!(device = "0", "shown at debug");
            tracing::trace!("hidden");
        });
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.contains("shown at debug") && text.contains("device=\"0\""),
            "{text}"
        );
        assert!(!text.contains("hidden"));
        assert!(!text.contains('\u{1b}'), "no ANSI colours in files");
    }

    #[test]
    fn text_is_the_name_of_the_line_format_and_compact_still_parses() {
        use clap::ValueEnum;
        let names: Vec<String> = LogFormat::value_variants()
            .iter()
            .filter_map(|v| v.to_possible_value().map(|p| p.get_name().to_string()))
            .collect();
        assert_eq!(names, ["json", "text"]);
        assert_eq!(LogFormat::from_str("compact", true), Ok(LogFormat::Compact));
        for (s, f) in [
            ("JSON", Some(LogFormat::Json)),
            ("text", Some(LogFormat::Compact)),
        ] {
            assert_eq!(LogFormat::parse(s), f);
        }
        assert_eq!(LogFormat::parse("yaml"), None);
        #[derive(Deserialize)]
        struct C {
            f: LogFormat,
        }
        let c: C = serde_json::from_str(r#"{"f":"text"}"#).unwrap();
        assert_eq!(c.f, LogFormat::Compact);
    }

    #[test]
    fn unopenable_log_file_is_a_clear_error() {
        let settings = LogSettings {
            file: Some("/nonexistent-dir/x.log".into()),
            ..LogSettings::default()
        };
        let err = subscriber(&settings).err().expect("must fail");
        assert!(
            err.to_string()
                .contains("cannot open log file /nonexistent-dir/x.log"),
            "{err}"
        );
    }
}
