//! Where the wrapper logs. Never stdout: for `runc create` stdout (and stderr) are the
//! container's own streams, and for `runc state` stdout is JSON the shim parses.
//!
//! 1. `log-file` from the config, when set (config level and format);
//! 2. else runc's `--log` file (containerd's shim passes `<bundle>/log.json` with
//!    `--log-format json`): one JSON object per line, so the shim's reader, which decodes every
//!    line as JSON looking for runc's `"level":"error"` entry, still works (our levels are upper
//!    case and never taken for runc's errors; our own failure line is added by
//!    `crate::report_error` in runc's format);
//! 3. else (run by hand, no `--log`) stderr, coloured only on a terminal;
//!
//! and in cases 2 and 3 the `gpuhook::decision` lines also to the journal (`/dev/log`), since
//! runc's log is deleted with the bundle.
//!
//! `GPUHOOK_LOG_FORMAT` (`json`/`text`) overrides the config's `log-format` for 1 and 3; 2
//! always follows runc's `--log-format`, which the shim decodes.
//!
//! A log that cannot be opened is not a reason to fail a container: logging is then off.

use std::ffi::OsString;
use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::Mutex;

use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::SubscriberExt;

use gpuhook::config::Config;
use gpuhook::logging;

pub fn init(config: &Config, argv: &[OsString]) {
    let mut settings = config.log_settings();
    // GPUHOOK_LOG_FORMAT (the wrapper has no flags of its own: runc's `--log-format` is the
    // format of runc's log, which ours then follows) sets the format of log-file and stderr.
    settings.format = logging::LogFormat::from_env().unwrap_or(settings.format);
    if settings.file.is_some() {
        if let Err(e) = logging::init(&settings) {
            eprintln!("gpuhook-runtime: warning: {e}; logging is off");
        }
        return;
    }
    let level = LevelFilter::from(settings.level);
    let builder = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_ansi(false);
    let runc_log = crate::parse_argv(argv).ok().and_then(|a| {
        let json = a.log_is_json();
        a.log.map(|p| (p, json))
    });
    let subscriber: Box<dyn tracing::Subscriber + Send + Sync> = match runc_log {
        Some((path, json)) => {
            let file = match OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o644)
                .open(&path)
            {
                Ok(f) => Mutex::new(f),
                Err(_) => return,
            };
            if json {
                Box::new(
                    builder
                        .json()
                        .flatten_event(true)
                        .with_writer(file)
                        .finish(),
                )
            } else {
                Box::new(builder.compact().with_writer(file).finish())
            }
        }
        None if settings.format == logging::LogFormat::Json => {
            Box::new(builder.json().with_writer(std::io::stderr).finish())
        }
        None => Box::new(
            builder
                .with_ansi(logging::stderr_ansi())
                .compact()
                .with_writer(std::io::stderr)
                .finish(),
        ),
    };
    // No log file set up: the decision lines also go to the journal (see `DecisionSyslog`).
    let socket = std::path::Path::new(logging::SYSLOG_SOCKET);
    let _ = match logging::DecisionSyslog::connect(socket, "gpuhook-runtime") {
        Some(journal) => tracing::subscriber::set_global_default(subscriber.with(journal)),
        None => tracing::subscriber::set_global_default(subscriber),
    };
}
