//! `gpuhook-mig-parted` (also installed as `nvidia-mig-parted`): a thin `main` over
//! [`gpuhook_mig::cli`].

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = gpuhook_mig::cli::Cli::parse();
    let level = if cli.debug { "debug" } else { "warn" };
    let filter = tracing_subscriber::EnvFilter::try_from_env("GPUHOOK_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    match gpuhook_mig::cli::run(&cli) {
        Ok(code) => std::process::ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
