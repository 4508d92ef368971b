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
        // Several workers: a GPU whose blocking call overruns (a slow disk, a hung driver call
        // on the blocking pool) must not hold up the other GPUs' tasks or the HTTP endpoint.
        None => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .max_blocking_threads(32)
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
