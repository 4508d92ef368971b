//! `--metrics-listen ADDR`: a minimal HTTP/1.1 endpoint serving `GET /metrics` in Prometheus
//! text format (one request per connection, bounded request head, timeouts), so the plugin
//! needs no HTTP server framework. What it serves comes from [`UsageSource`]: the state the
//! serving loop published (advertisement and inventory: no config read, no MPS spec parsed per
//! scrape), the served health and the kubelet's pod-resources assignments.
//!
//! The endpoint runs on a thread and runtime of its own ([`spawn`]), so a scrape never waits
//! for, nor holds, the workers that answer the kubelet (#22). Connections: at most
//! [`MAX_CONNECTIONS`]; a request head must arrive within [`HEAD_TIMEOUT`]; when every slot is
//! taken, the oldest connection still waiting for its request head is closed to make room, so
//! idle connections cannot keep a scraper out.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch, Semaphore};

use crate::run::Loaded;
use crate::served::HealthState;
use crate::usage::{usage, Usage};

/// Largest request head read.
const MAX_REQUEST_HEAD: usize = 8192;
/// Longest a client may take to send its request head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest the answer may take once the head is in.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections answered at once.
pub const MAX_CONNECTIONS: usize = 32;

/// Why no usage report could be made (the pod-resources API failing is not one: users are
/// then reported unknown).
#[derive(Debug, thiserror::Error)]
pub enum UsageError {
    #[error("the plugin has not loaded its config yet")]
    NotLoaded,
}

/// Everything a usage report is computed from.
#[derive(Debug, Clone)]
pub struct UsageSource {
    /// The state the serving loop publishes ([`crate::run::run_published`]).
    pub loaded: watch::Receiver<Option<Arc<Loaded>>>,
    pub health: watch::Receiver<HealthState>,
    pub pod_resources: PathBuf,
    pub hostname: String,
}

impl UsageSource {
    /// The usage now, from the published state.
    pub async fn usage(&self) -> Result<Usage, UsageError> {
        let loaded = self.loaded.borrow().clone().ok_or(UsageError::NotLoaded)?;
        let assigned = crate::podresources::list(&self.pod_resources).await;
        let health = self.health.borrow().clone();
        Ok(usage(
            &self.hostname,
            &loaded.ad,
            loaded.inventory.as_deref(),
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

/// Reads a request head (up to the blank line or [`MAX_REQUEST_HEAD`]).
async fn read_head(conn: &mut tokio::net::TcpStream) -> std::io::Result<Vec<u8>> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_REQUEST_HEAD {
        let n = conn.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    Ok(head)
}

async fn answer(
    mut conn: tokio::net::TcpStream,
    head: &[u8],
    src: &UsageSource,
) -> std::io::Result<()> {
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let mut parts = line.split(|&b| b == b' ');
    let (method, path) = (parts.next(), parts.next());
    let (status, body) = match (method, path) {
        (Some(b"GET"), Some(b"/metrics")) => match src.usage().await {
            Ok(u) => ("200 OK", crate::usage::prometheus(&u)),
            Err(e) => (
                "503 Service Unavailable",
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

/// Connections still waiting for their request head, oldest first: closing one frees its slot.
#[derive(Default)]
struct Waiting {
    next: u64,
    kicks: BTreeMap<u64, oneshot::Sender<()>>,
}

type Shared = Arc<Mutex<Waiting>>;

fn lock(w: &Shared) -> std::sync::MutexGuard<'_, Waiting> {
    w.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One connection: its head within [`HEAD_TIMEOUT`] (unless closed for a newer one), then the
/// answer within [`ANSWER_TIMEOUT`].
async fn connection(
    mut conn: tokio::net::TcpStream,
    peer: std::net::SocketAddr,
    src: UsageSource,
    waiting: Shared,
) {
    let (kick, kicked) = oneshot::channel();
    let id = {
        let mut w = lock(&waiting);
        w.next += 1;
        let id = w.next;
        w.kicks.insert(id, kick);
        id
    };
    let head = tokio::select! {
        h = tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut conn)) => h,
        _ = kicked => {
            tracing::debug!(%peer, "metrics connection closed for a newer one (no request yet)");
            return;
        }
    };
    lock(&waiting).kicks.remove(&id);
    let head = match head {
        Ok(Ok(h)) => h,
        Ok(Err(e)) => return tracing::debug!(%peer, error = %e, "metrics request failed"),
        Err(_) => return tracing::debug!(%peer, "no metrics request within the deadline"),
    };
    match tokio::time::timeout(ANSWER_TIMEOUT, answer(conn, &head, &src)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "metrics answer failed"),
        Err(_) => tracing::debug!(%peer, "metrics answer timed out"),
    }
}

/// A free slot, closing the oldest connection still waiting for its head when none is free.
async fn slot(
    slots: &Arc<Semaphore>,
    waiting: &Shared,
) -> Option<tokio::sync::OwnedSemaphorePermit> {
    if let Ok(s) = slots.clone().try_acquire_owned() {
        return Some(s);
    }
    let oldest = lock(waiting).kicks.pop_first();
    let (_, kick) = oldest?;
    let _ = kick.send(());
    tokio::time::timeout(Duration::from_secs(1), slots.clone().acquire_owned())
        .await
        .ok()?
        .ok()
}

/// Serves `/metrics` on `listener` until `shutdown` resolves.
pub async fn serve(listener: TcpListener, src: UsageSource, shutdown: impl Future<Output = ()>) {
    let mut shutdown = std::pin::pin!(shutdown);
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let waiting = Shared::default();
    loop {
        tokio::select! {
            () = &mut shutdown => return,
            conn = listener.accept() => match conn {
                Ok((conn, peer)) => {
                    let Some(slot) = slot(&slots, &waiting).await else {
                        tracing::debug!(%peer, "too many metrics connections; closing");
                        continue;
                    };
                    let (src, waiting) = (src.clone(), waiting.clone());
                    tokio::spawn(async move {
                        let _slot = slot;
                        connection(conn, peer, src, waiting).await;
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

/// The endpoint on its own thread and runtime; stops (and joins) when dropped.
#[derive(Debug)]
pub struct MetricsThread {
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Serves `/metrics` on `listener` from a thread of its own with a one-thread runtime, apart
/// from the runtime that answers the kubelet.
pub fn spawn(listener: std::net::TcpListener, src: UsageSource) -> std::io::Result<MetricsThread> {
    listener.set_nonblocking(true)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (stop, rx) = oneshot::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            rt.block_on(async move {
                match TcpListener::from_std(listener) {
                    Ok(l) => serve(l, src, async { drop(rx.await) }).await,
                    Err(e) => tracing::error!(error = %e, "cannot serve metrics"),
                }
            });
        })?;
    Ok(MetricsThread {
        stop: Some(stop),
        thread: Some(thread),
    })
}

impl Drop for MetricsThread {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
