//! `gpuhook-exporter`: see the library (`gpuhook_exporter`).

use clap::Parser;
use gpuhook_exporter::cli::Args;

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let level = if args.debug { "debug" } else { "info" };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if args.log_format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
    match gpuhook_exporter::run::run(&args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gpuhook-exporter: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
