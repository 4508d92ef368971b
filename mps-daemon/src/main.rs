//! `gpu-mps-daemon`: see the library docs.

use clap::Parser;
use gpu_mps_daemon::cli::{self, Cli, Command};
use gpu_mps_daemon::run;

fn main() {
    let args = Cli::parse();
    let logs = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        );
    let format = match &args.command {
        Some(Command::Check(r)) => r.log_format,
        _ => args.run.log_format,
    };
    if format == Some(cli::LogFormat::Json) {
        logs.json().init();
    } else {
        logs.init();
    }
    raise_nofile();
    let res = match args.command {
        Some(Command::Status(s)) => run::status_cmd(&s).map_err(anyhow::Error::from),
        Some(Command::Check(r)) => run::check(&r).map_err(anyhow::Error::from),
        // Several workers: a GPU whose blocking call overruns (a slow disk, a hung driver call
        // on the blocking pool) must not hold up the other GPUs' tasks or the HTTP endpoint.
        None => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .max_blocking_threads(32)
            .enable_all()
            .build()
            .map_err(anyhow::Error::from)
            .and_then(|rt| rt.block_on(run::run(args.run)).map_err(anyhow::Error::from)),
    };
    if let Err(e) = res {
        eprintln!("gpu-mps-daemon: error: {e:#}");
        std::process::exit(1);
    }
}

/// The soft fd limit the daemon runs with (the systemd unit sets `LimitNOFILE=` to this).
const NOFILE: u64 = 65536;

/// Raises the soft `RLIMIT_NOFILE` to [`NOFILE`] (at most the hard limit), as Go programs do at
/// start: Kubernetes has no per-pod setting, and a container may inherit a soft limit of 1024.
/// The HTTP endpoint caps its connections, so fds stay free for probes either way.
fn raise_nofile() {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the valid struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) } != 0 {
        return;
    }
    let want = l.rlim_max.min(NOFILE);
    if l.rlim_cur < want {
        l.rlim_cur = want;
        // SAFETY: setrlimit reads the valid struct we pass.
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &l) };
    }
}
