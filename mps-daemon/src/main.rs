//! `gpu-mps-daemon`: see the library docs.

use clap::Parser;
use gpu_mps_daemon::cli::{self, Cli, Command};

fn main() {
    let args = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let res = match args.command {
        Some(Command::Status(s)) => cli::status_cmd(&s),
        Some(Command::Check(r)) => cli::check(&r),
        None => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(anyhow::Error::from)
            .and_then(|rt| rt.block_on(cli::run(args.run))),
    };
    if let Err(e) = res {
        eprintln!("gpu-mps-daemon: error: {e:#}");
        std::process::exit(1);
    }
}
