//! `status` and `serve --metrics-listen`: who uses which device, from the kubelet's
//! pod-resources API ([`gpuhook_device_plugin::usage`]).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Args;
use gpuhook_device_plugin::metrics::{hostname, spawn, MetricsThread, UsageSource};
use gpuhook_device_plugin::podresources::POD_RESOURCES_SOCKET;
use gpuhook_device_plugin::run::{AdSource, Loaded};
use gpuhook_device_plugin::served::HealthState;
use tokio::sync::watch;

use super::NodeArgs;

#[derive(Args, Debug)]
pub struct StatusArgs {
    #[command(flatten)]
    node: NodeArgs,
    /// The kubelet's pod-resources socket.
    #[arg(long, default_value = POD_RESOURCES_SOCKET)]
    pod_resources_socket: PathBuf,
    /// The kubelet's device plugin dir (health as the running plugin serves it).
    #[arg(long, default_value = gpuhook_device_plugin::api::DEVICE_PLUGIN_PATH)]
    plugin_dir: PathBuf,
    /// The node's name (the `Hostname` shown; default: the host name).
    #[arg(long, env = "NODE_NAME")]
    node_name: Option<String>,
}

#[derive(Args, Debug)]
pub struct MetricsArgs {
    /// Serve Prometheus metrics (`GET /metrics`) on this address, e.g. `0.0.0.0:9400`.
    #[arg(long)]
    metrics_listen: Option<SocketAddr>,
    /// The kubelet's pod-resources socket (pod/namespace/container labels).
    #[arg(long, default_value = POD_RESOURCES_SOCKET)]
    pod_resources_socket: PathBuf,
}

impl MetricsArgs {
    /// Binds and serves the metrics endpoint (on its own thread) when `--metrics-listen` is
    /// given, reporting from the state the serving loop publishes on `loaded`.
    pub fn start(
        &self,
        loaded: watch::Receiver<Option<Arc<Loaded>>>,
        node_name: Option<&str>,
        health: watch::Receiver<HealthState>,
    ) -> Result<Option<MetricsThread>> {
        let Some(addr) = self.metrics_listen else {
            return Ok(None);
        };
        let src = UsageSource {
            loaded,
            health,
            pod_resources: self.pod_resources_socket.clone(),
            hostname: hostname(node_name),
        };
        let listener = std::net::TcpListener::bind(addr)
            .with_context(|| format!("cannot listen on --metrics-listen {addr}"))?;
        let thread = spawn(listener, src).context("cannot start the metrics thread")?;
        tracing::info!(%addr, "serving metrics on /metrics");
        Ok(Some(thread))
    }
}

/// Prints the node's devices and who uses them as JSON.
pub fn status(args: StatusArgs) -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let usage = rt.block_on(async {
        let (_tx, health) = watch::channel(HealthState::default());
        let mut source = args.node.source();
        let now = source.load().map_err(|e| anyhow::anyhow!(e))?;
        let (_published, loaded) = watch::channel(Some(Arc::new(now)));
        let src = UsageSource {
            loaded,
            health,
            pod_resources: args.pod_resources_socket.clone(),
            hostname: hostname(args.node_name.as_deref()),
        };
        let u = src.usage().await?;
        anyhow::Ok(gpuhook_device_plugin::status::with_served_health(u, &args.plugin_dir).await)
    })?;
    println!("{}", serde_json::to_string_pretty(&usage)?);
    if let Some(e) = &usage.pod_resources_error {
        tracing::warn!(error = %e, "users unknown: the kubelet's pod-resources API did not answer");
    }
    Ok(())
}
