//! `status` and `serve --metrics-listen`: who uses which device, from the kubelet's
//! pod-resources API ([`gpuhook_device_plugin::usage`]).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Args;
use gpuhook_device_plugin::metrics::{hostname, UsageSource};
use gpuhook_device_plugin::podresources::POD_RESOURCES_SOCKET;
use gpuhook_device_plugin::served::HealthState;
use tokio::sync::{oneshot, watch};

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

/// The running metrics server; stops when dropped.
pub struct Metrics {
    _stop: oneshot::Sender<()>,
}

impl MetricsArgs {
    /// Binds and serves the metrics endpoint when `--metrics-listen` is given.
    pub async fn start(
        &self,
        node: &NodeArgs,
        node_name: Option<&str>,
        health: watch::Receiver<HealthState>,
    ) -> Result<Option<Metrics>> {
        let Some(addr) = self.metrics_listen else {
            return Ok(None);
        };
        let source = node.source();
        let inventory = source.inventory().ok().map(Arc::new);
        let src = UsageSource {
            source,
            inventory,
            health,
            pod_resources: self.pod_resources_socket.clone(),
            hostname: hostname(node_name),
        };
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen on --metrics-listen {addr}"))?;
        tracing::info!(%addr, "serving metrics on /metrics");
        let (stop, rx) = oneshot::channel::<()>();
        tokio::spawn(gpuhook_device_plugin::metrics::serve(
            listener,
            src,
            async {
                let _ = rx.await;
            },
        ));
        Ok(Some(Metrics { _stop: stop }))
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
        let src = UsageSource {
            source: args.node.source(),
            inventory: None,
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
