//! Command line: dcgm-exporter's flags and environment variables where they mean something
//! without DCGM (`pkg/cmd/app.go` of 4.5.3-4.8.2), plus what NVML-direct collection needs
//! (driver root, CRI socket, /proc of the host, per-GPU timeout).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use crate::counters::DEFAULT_COUNTERS_PATH;

#[derive(Debug, Clone, Parser)]
#[command(
    name = "gpuhook-exporter",
    version,
    about = "GPU telemetry for Prometheus from NVML, compatible with NVIDIA dcgm-exporter, with per-pod usage of shared GPUs"
)]
pub struct Args {
    /// Address to listen on (`:9400` is every IPv4 address, `[::]:9400` every IPv6 one).
    #[arg(
        short = 'a',
        long,
        env = "DCGM_EXPORTER_LISTEN",
        default_value = ":9400"
    )]
    pub address: String,

    /// How often each GPU is sampled, in milliseconds.
    #[arg(short = 'c', long, env = "DCGM_EXPORTER_INTERVAL", default_value_t = 30000,
          value_parser = clap::value_parser!(u64).range(100..=3_600_000))]
    pub collect_interval: u64,

    /// The counters CSV (`FIELD, type, help` lines); NVIDIA's default-counters.csv is built in
    /// and used when the default path does not exist.
    #[arg(short = 'f', long, env = "DCGM_EXPORTER_COLLECTORS", default_value = DEFAULT_COUNTERS_PATH)]
    pub collectors: PathBuf,

    /// Per-pod usage of each GPU (`gpuhook_pod_*`), naming pods through the CRI socket.
    #[arg(short = 'k', long, env = "DCGM_EXPORTER_KUBERNETES")]
    pub kubernetes: bool,

    /// Leave the `Hostname` label out.
    #[arg(short = 'n', long)]
    pub no_hostname: bool,

    /// Replace blanks in `modelName` with dashes.
    #[arg(long, env = "DCGM_EXPORTER_REPLACE_BLANKS_IN_MODEL_NAME")]
    pub replace_blanks_in_model_name: bool,

    /// Root of the NVIDIA driver: NVML is loaded from its ld.so.cache, never from the search path.
    #[arg(long, env = "GPUHOOK_DRIVER_ROOT", default_value = "/")]
    pub driver_root: PathBuf,

    /// An explicit libnvidia-ml.so.1 (instead of the driver root's).
    #[arg(long, env = "GPUHOOK_NVML_LIB")]
    pub nvml_lib: Option<PathBuf>,

    /// The CRI runtime socket that names the pod of a GPU process's container (with -k).
    #[arg(
        long,
        env = "GPUHOOK_CRI_SOCKET",
        default_value = "/run/containerd/containerd.sock"
    )]
    pub cri_socket: PathBuf,

    /// The host's /proc (GPU process ids are host pids; in a pod without hostPID mount the
    /// host's /proc and point this there).
    #[arg(long, env = "GPUHOOK_PROC_ROOT", default_value = "/proc")]
    pub proc_root: PathBuf,

    /// A GPU whose NVML sample runs longer than this (ms) is marked stale.
    #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(u64).range(10..=600_000))]
    pub nvml_timeout: u64,

    /// Scrapes within this many ms share one rendered page (bounds the scrape rate's cost).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(0..=60_000))]
    pub scrape_cache: u64,

    /// Log format.
    #[arg(long, env = "DCGM_EXPORTER_LOG_FORMAT", default_value = "text", value_parser = ["text", "json"])]
    pub log_format: String,

    /// Debug logging.
    #[arg(long, env = "DCGM_EXPORTER_DEBUG")]
    pub debug: bool,
}

/// A listen address that does not parse.
#[derive(Debug, thiserror::Error)]
#[error(
    "invalid --address `{0}`: expected `:PORT`, `HOST:PORT` or `[IPV6]:PORT` with a numeric host"
)]
pub struct AddressError(pub String);

impl Args {
    /// `--address` as a socket address (`:9400` → `0.0.0.0:9400`).
    pub fn listen(&self) -> Result<SocketAddr, AddressError> {
        let a = self.address.trim();
        let full = if a.starts_with(':') {
            format!("0.0.0.0{a}")
        } else {
            a.to_string()
        };
        full.parse().map_err(|_| AddressError(self.address.clone()))
    }

    pub fn interval(&self) -> Duration {
        Duration::from_millis(self.collect_interval)
    }
}
