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
use gpuhook_device_plugin::run::{run, Options};
use gpuhook_device_plugin::served::{HealthState, DEFAULT_CONTAINER_PIPE_DIR};
use gpuhook_device_plugin::service::{PreferError, Preferrer};
use gpuhook_device_plugin::source::{ConfigName, ConfigSource, InventoryFrom};
use gpuhook_node::DiscoverOptions;
use gpuhook_sharing::Resource;

#[derive(Parser, Debug)]
#[command(
    name = "gpuhook-device-plugin",
    version,
    about = "Kubernetes device plugin for GPUs, MIG, time-slicing and MPS"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Serve the node's resources to the kubelet.
    Serve(ServeArgs),
    /// Print as JSON the resources, device IDs and labels this node would advertise.
    DryRun(NodeArgs),
    /// Print the node labels, or write them as a Node Feature Discovery feature file.
    Labels {
        #[command(flatten)]
        node: NodeArgs,
        /// Write the feature file here (atomically) instead of printing.
        #[arg(long)]
        output: Option<PathBuf>,
    },
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

/// Until topology-aware preference is wired: must_include, then the available IDs in the
/// kubelet's order (what the kubelet itself would pick).
struct InOrder;

impl Preferrer for InOrder {
    fn preferred(
        &self,
        _: &Resource,
        available: &[String],
        must: &[String],
        size: usize,
    ) -> Result<Vec<String>, PreferError> {
        let mut out = must.to_vec();
        out.extend(available.iter().filter(|a| !must.contains(a)).cloned());
        out.truncate(size);
        Ok(out)
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("cannot install signal handlers; stop with SIGKILL");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM"),
        _ = int.recv() => tracing::info!("SIGINT"),
    }
}

fn serve(args: ServeArgs) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(async {
        let (_health_tx, health) = tokio::sync::watch::channel(HealthState::default());
        let opts = Options {
            plugin_dir: args.plugin_dir.clone(),
            container_pipe_dir: args.container_pipe_dir.clone(),
            poll: Duration::from_millis(250),
        };
        run(
            opts,
            Box::new(args.node.source()),
            health,
            Arc::new(InOrder),
            shutdown_signal(),
        )
        .await
    })?;
    Ok(())
}

fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    match Cli::parse().cmd {
        Cmd::Serve(a) => serve(a),
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
            let ad = src.advertisement(&inv).map_err(|e| anyhow::anyhow!(e))?;
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

/// Writes through a temp file and a rename: NFD never reads a half-written file.
fn write_atomic(path: &std::path::Path, text: &str) -> Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, path)
        .with_context(|| format!("cannot rename {} to {}", tmp.display(), path.display()))
}
