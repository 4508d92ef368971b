//! `gpuhook-device-plugin`: a thin `main` over the library.
//!
//! - `serve`: serve the node's resources to the kubelet until SIGTERM/SIGINT;
//! - `dry-run`: print as JSON what this node would advertise under a config (no kubelet);
//! - `labels`: print the node labels (NFD feature file format), or write them to a file.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use gpuhook_device_plugin::error::chain;
use gpuhook_device_plugin::monitor::{watched_gpus, Following};
use gpuhook_device_plugin::preferred::{AllocationPolicy, TopologyPreferrer};
use gpuhook_device_plugin::run::{run_published, AdSource, Options};
use gpuhook_device_plugin::served::{HealthState, DEFAULT_CONTAINER_PIPE_DIR};
use gpuhook_device_plugin::service::{Preferrer, WithoutTopology};
use gpuhook_device_plugin::source::{ConfigName, ConfigSource, InventoryFrom};
use gpuhook_node::DiscoverOptions;

mod node_label_args;
mod usage_args;

#[derive(Parser, Debug)]
#[command(
    name = "gpuhook-device-plugin",
    version,
    about = "Kubernetes device plugin for GPUs, MIG, time-slicing and MPS",
    after_help = "Examples:\n  \
        gpuhook-device-plugin serve --config /etc/gpuhook/device-plugin --driver-root /\n  \
        gpuhook-device-plugin dry-run --config /etc/gpuhook/device-plugin\n  \
        gpuhook-device-plugin labels --config /etc/gpuhook/device-plugin"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
    /// Log format on stderr: `text` (colours only on a terminal) or `json` (one object a line).
    #[arg(
        long,
        global = true,
        value_name = "FORMAT",
        env = "GPUHOOK_LOG_FORMAT",
        value_enum
    )]
    log_format: Option<LogFormat>,
}

/// `--log-format` values.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum LogFormat {
    Text,
    Json,
}

/// Logs go to stderr (stdout carries `dry-run`/`labels` output): JSON on request, colours only
/// when stderr is a terminal.
fn init_logging(format: Option<LogFormat>) {
    let logs = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        );
    if format == Some(LogFormat::Json) {
        logs.json().init();
    } else {
        logs.init();
    }
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Serve the node's resources to the kubelet.
    #[command(after_help = "Examples:\n  \
        gpuhook-device-plugin serve --config /etc/gpuhook/device-plugin --driver-root /driver-root\n  \
        gpuhook-device-plugin serve --config /etc/gpuhook/device-plugin --config-name t4 \
        --plugin-dir /var/lib/kubelet/device-plugins")]
    Serve(ServeArgs),
    /// Print as JSON the resources, device IDs and labels this node would advertise.
    #[command(after_help = "Examples:\n  \
        gpuhook-device-plugin dry-run --config /etc/gpuhook/device-plugin\n  \
        gpuhook-device-plugin dry-run --config /etc/gpuhook/device-plugin --config-name t4 --driver-root /")]
    DryRun(NodeArgs),
    /// Print the node labels, or write them as a Node Feature Discovery feature file.
    #[command(after_help = "Examples:\n  \
        gpuhook-device-plugin labels --config /etc/gpuhook/device-plugin\n  \
        gpuhook-device-plugin labels --config /etc/gpuhook/device-plugin --node-label-file /run/config-name \
        --output /etc/kubernetes/node-feature-discovery/features.d/gpuhook")]
    Labels {
        #[command(flatten)]
        node: NodeArgs,
        /// Write the feature file here (atomically) instead of printing.
        #[arg(long)]
        output: Option<PathBuf>,
    },
    /// Print as JSON each advertised device, its GPU, health and the pods using it.
    #[command(after_help = "Examples:\n  \
        gpuhook-device-plugin status --config /etc/gpuhook/device-plugin\n  \
        gpuhook-device-plugin status --config /etc/gpuhook/device-plugin --driver-root /driver-root \
        --pod-resources-socket /var/lib/kubelet/pod-resources/kubelet.sock")]
    Status(usage_args::StatusArgs),
}

#[derive(Args, Debug)]
struct NodeArgs {
    /// NVIDIA device-plugin config: a file, or a directory of named configs (ConfigMap).
    #[arg(long, env = "CONFIG_FILE")]
    config: PathBuf,
    /// The node's `nvidia.com/device-plugin.config` label value.
    #[arg(long, conflicts_with = "node_label_file")]
    config_name: Option<String>,
    /// A file holding the label value (re-read when it changes).
    #[arg(long)]
    node_label_file: Option<PathBuf>,
    /// Driver root (`nvidiaDriverRoot`).
    #[arg(long, default_value = "/")]
    driver_root: PathBuf,
    /// NVML library to use instead of the driver root's.
    #[arg(long)]
    nvml_lib: Option<PathBuf>,
    /// Use this serialised inventory (JSON) instead of discovering the node.
    #[arg(long)]
    inventory: Option<PathBuf>,
}

#[derive(Args, Debug)]
struct ServeArgs {
    #[command(flatten)]
    node: NodeArgs,
    /// The kubelet's device plugin dir (kubelet.sock and plugin sockets).
    #[arg(long, default_value = gpuhook_device_plugin::api::DEVICE_PLUGIN_PATH)]
    plugin_dir: PathBuf,
    /// Where MPS pipe directories appear in containers (gpu-mps-daemon's containerPipeDirectory).
    #[arg(long, default_value = DEFAULT_CONTAINER_PIPE_DIR)]
    container_pipe_dir: String,
    #[command(flatten)]
    watch: node_label_args::WatchArgs,
    #[command(flatten)]
    metrics: usage_args::MetricsArgs,
}

impl NodeArgs {
    fn source(&self) -> ConfigSource {
        let name = match &self.node_label_file {
            Some(p) => ConfigName::File(p.clone()),
            None => ConfigName::Fixed(self.config_name.clone()),
        };
        let inventory = match &self.inventory {
            Some(p) => InventoryFrom::File(p.clone()),
            None => InventoryFrom::Discover(DiscoverOptions {
                driver_root: self.driver_root.clone(),
                dev_root: None,
                nvml_lib: self.nvml_lib.clone(),
            }),
        };
        ConfigSource::new(self.config.clone(), name, inventory)
    }
}

/// Installs the SIGTERM/SIGINT handlers now (a signal before this kills the process), and
/// returns the future that resolves on the first of them.
fn shutdown_signal() -> Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM"),
            _ = int.recv() => tracing::info!("SIGINT"),
        }
    })
}

fn serve(mut args: ServeArgs) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let _watcher = args.watch.start(&mut args.node)?;
    rt.block_on(async {
        let shutdown = shutdown_signal()?;
        let (_health_tx, mut health) = tokio::sync::watch::channel(HealthState::default());
        let mut monitor = None;
        let mut following = None;
        let mut preferrer: Arc<dyn Preferrer> = Arc::new(WithoutTopology);
        let (root, lib) = (&args.node.driver_root, args.node.nvml_lib.as_deref());
        match gpuhook_device_plugin::monitor::load_nvml(root, lib) {
            Ok(nvml) => {
                preferrer = Arc::new(TopologyPreferrer {
                    nvml: nvml.clone(),
                    root: root.clone(),
                    policy: AllocationPolicy::default(),
                });
                let inv = args.node.source().inventory().context("cannot list the node's GPUs for health monitoring")?;
                match gpuhook_device_plugin::monitor::start(nvml, &inv) {
                    Ok((m, rx)) => {
                        // The monitor follows MIG re-partitions through the source's loads.
                        following = Some((m.retarget(), watched_gpus(&inv)));
                        monitor = Some(m);
                        health = rx;
                    }
                    Err(e) => tracing::warn!(error = %chain(&e), "no GPU health monitoring: every device stays Healthy"),
                }
            }
            Err(e) => tracing::warn!(error = %chain(&e), "no NVML: no GPU health monitoring, no topology in preferred allocations"),
        }
        let node_name = args.watch.node_name.as_deref();
        let (published, loaded) = tokio::sync::watch::channel(None);
        let _metrics = args.metrics.start(loaded, node_name, health.clone())?;
        let opts = Options {
            plugin_dir: args.plugin_dir.clone(),
            container_pipe_dir: args.container_pipe_dir.clone(),
            poll: Duration::from_millis(250),
        };
        let mut source: Box<dyn AdSource> = Box::new(args.node.source());
        if let Some((retarget, watched)) = following {
            source = Box::new(Following::new(source, retarget, watched));
        }
        let res = run_published(
            opts,
            source,
            health,
            preferrer,
            shutdown,
            published,
        )
        .await;
        if let Some(m) = monitor {
            m.stop();
        }
        res.map_err(anyhow::Error::from)
    })
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    match cli.cmd {
        Cmd::Serve(a) => serve(a),
        Cmd::Status(a) => usage_args::status(a),
        Cmd::DryRun(a) => {
            let src = a.source();
            let label = src.label()?;
            let inv = src.inventory()?;
            let d = gpuhook_sharing::dry_run(&a.config, label.as_deref(), &inv);
            println!("{}", d.to_json());
            anyhow::ensure!(
                d.is_ok(),
                "the config gives no advertisement on this node (errors above)"
            );
            Ok(())
        }
        Cmd::Labels { node, output } => {
            let src = node.source();
            let inv = src.inventory()?;
            let mut ad = src.advertisement(&inv).map_err(|e| anyhow::anyhow!(e))?;
            if !src.no_timestamp().map_err(|e| anyhow::anyhow!(e))? {
                add_timestamp(&mut ad)?;
            }
            let text = gpuhook_sharing::nfd_feature_file(&ad);
            match output {
                Some(p) => write_atomic(&p, &text),
                None => {
                    print!("{text}");
                    Ok(())
                }
            }
        }
    }
}

/// GFD's `nvidia.com/gfd.timestamp` (Unix seconds now; NVIDIA
/// `internal/lm/timestamp.go:NewTimestampLabeler`). Only `labels` adds it: `dry-run`'s output
/// stays deterministic.
fn add_timestamp(ad: &mut gpuhook_sharing::Advertisement) -> Result<()> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .context("the clock is before 1970")?;
    ad.labels
        .insert("nvidia.com/gfd.timestamp".into(), now.as_secs().to_string());
    Ok(())
}

/// Writes through the workspace's one atomic writer: NFD never reads a half-written file.
fn write_atomic(path: &std::path::Path, text: &str) -> Result<()> {
    gpuhook_fs::AtomicWriter::new(0o644)
        .write(path, text.as_bytes())
        .map(drop)
        .context("cannot write the feature file")
}
