//! `--metrics-listen ADDR`: a minimal HTTP/1.1 endpoint serving `GET /metrics` in Prometheus
//! text format (one request per connection, bounded request head, timeouts), so the plugin
//! needs no HTTP server framework. What it serves comes from [`UsageSource`]: the advertisement
//! now, the served health and the kubelet's pod-resources assignments.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use gpuhook_node::Inventory;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::served::HealthState;
use crate::source::ConfigSource;
use crate::usage::{usage, Usage};

/// Largest request head read.
const MAX_REQUEST_HEAD: usize = 8192;
/// Longest a client may take to send its request or read the answer.
const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections answered at once; more are closed at once (a scraper needs one).
const MAX_CONNECTIONS: usize = 32;

/// Why no usage report could be made (the pod-resources API failing is not one: users are
/// then reported unknown).
#[derive(Debug, thiserror::Error)]
pub enum UsageError {
    #[error("cannot list the node's GPUs")]
    Inventory(#[source] crate::source::SourceError),
    #[error("the node's config gives no advertisement")]
    Config(#[source] crate::service::PreferError),
}

/// Everything a usage report is computed from.
#[derive(Debug, Clone)]
pub struct UsageSource {
    pub source: ConfigSource,
    /// The node's GPUs (read once: the set of GPUs doesn't change while the plugin runs).
    pub inventory: Option<Arc<Inventory>>,
    pub health: watch::Receiver<HealthState>,
    pub pod_resources: PathBuf,
    pub hostname: String,
}

impl UsageSource {
    /// The usage now; the config must load (an invalid one is reported as the error).
    pub async fn usage(&self) -> Result<Usage, UsageError> {
        let inv = match &self.inventory {
            Some(i) => i.clone(),
            None => Arc::new(self.source.inventory().map_err(UsageError::Inventory)?),
        };
        let ad = self
            .source
            .advertisement(&inv)
            .map_err(UsageError::Config)?;
        let assigned = crate::podresources::list(&self.pod_resources).await;
        let health = self.health.borrow().clone();
        Ok(usage(
            &self.hostname,
            &ad,
            Some(&inv),
            &health,
            assigned.as_deref(),
        ))
    }
}

/// The node's name as dcgm-exporter's `Hostname` label has it: `NODE_NAME`, else the host name.
pub fn hostname(node_name: Option<&str>) -> String {
    if let Some(n) = node_name.filter(|n| !n.is_empty()) {
        return n.to_string();
    }
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

async fn answer(mut conn: tokio::net::TcpStream, src: UsageSource) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_REQUEST_HEAD {
        let n = conn.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let mut parts = line.split(|&b| b == b' ');
    let (method, path) = (parts.next(), parts.next());
    let (status, body) = match (method, path) {
        (Some(b"GET"), Some(b"/metrics")) => match src.usage().await {
            Ok(u) => ("200 OK", crate::usage::prometheus(&u)),
            Err(e) => (
                "500 Internal Server Error",
                format!("{}\n", crate::error::chain(&e)),
            ),
        },
        (Some(b"GET"), _) => ("404 Not Found", String::from("only /metrics\n")),
        _ => ("405 Method Not Allowed", String::from("only GET\n")),
    };
    let msg = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(msg.as_bytes()).await?;
    conn.shutdown().await
}

/// Serves `/metrics` on `listener` until `shutdown` resolves.
pub async fn serve(listener: TcpListener, src: UsageSource, shutdown: impl Future<Output = ()>) {
    let mut shutdown = std::pin::pin!(shutdown);
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        tokio::select! {
            () = &mut shutdown => return,
            conn = listener.accept() => match conn {
                Ok((conn, peer)) => {
                    let Ok(slot) = slots.clone().try_acquire_owned() else {
                        tracing::debug!(%peer, "too many metrics connections; closing");
                        continue;
                    };
                    let src = src.clone();
                    tokio::spawn(async move {
                        let _slot = slot;
                        match tokio::time::timeout(IO_TIMEOUT, answer(conn, src)).await {
                            Ok(Ok(())) => {}
                            Ok(Err(e)) => tracing::debug!(%peer, error = %e, "metrics request failed"),
                            Err(_) => tracing::debug!(%peer, "metrics request timed out"),
                        }
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot accept a metrics connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
        }
    }
}
