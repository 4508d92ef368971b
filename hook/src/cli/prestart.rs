//! `gpuhook prestart`: the OCI prestart / createRuntime hook (see [`crate::prestart`]).

use std::path::PathBuf;

use clap::Args;

use super::CliError;
use crate::config::Config;
use crate::logging;
use crate::prestart::{self, PrestartOutcome};

/// Arguments of `gpuhook prestart`.
#[derive(Debug, Clone, Args)]
#[command(after_help = "Examples:\n  \
    # by hand, on a bundle runc would run (the OCI state a runtime passes on stdin)\n  \
    echo '{\"ociVersion\":\"1.0.2\",\"id\":\"c1\",\"status\":\"creating\",\"pid\":1234,\"bundle\":\"/run/bundle\"}' \
    | gpuhook --log-level debug prestart\n  \
    gpuhook prestart --state /run/bundle/state.json\n  \
    # as an OCI hook: {\"path\": \"/usr/local/bin/gpuhook\", \"args\": [\"gpuhook\", \"prestart\"]}")]
pub struct PrestartArgs {
    /// Read the OCI state from FILE instead of stdin (for debugging)
    #[arg(long, value_name = "FILE")]
    pub state: Option<PathBuf>,
    /// Config file, as the top-level --config; accepted after `prestart` because runtimes pass
    /// hook arguments verbatim (`["gpuhook", "prestart", "--config", FILE]`)
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

pub(super) fn run(args: &PrestartArgs, config: &Config) -> Result<(), CliError> {
    let Some(path) = &args.config else {
        return run_with(args, config);
    };
    // Logging was set up from the top-level config; this run logs where *this* config says.
    let config = Config::load(Some(path))?;
    let subscriber = logging::subscriber(&config.log_settings())?;
    tracing::subscriber::with_default(subscriber, || run_with(args, &config))
}

fn run_with(args: &PrestartArgs, config: &Config) -> Result<(), CliError> {
    let outcome = match &args.state {
        Some(file) => prestart::run(std::fs::File::open(file)?, config)?,
        None => prestart::run(std::io::stdin().lock(), config)?,
    };
    if let PrestartOutcome::Injected(applied) = &outcome {
        tracing::debug!(?applied, "prestart done");
    }
    Ok(())
}
