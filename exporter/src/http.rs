//! The HTTP endpoint on `:9400`: `GET /metrics`, `/health` (200 `OK`, as dcgm-exporter) and a
//! landing page at `/`. Bounded like the MPS daemon's endpoint (`mps-daemon/src/http.rs`): at
//! most [`MAX_CONNECTIONS`] connections at once (more are closed on accept), a request head of
//! at most [`MAX_REQUEST`] bytes, [`IO_TIMEOUT`] to send it and to take the answer (dcgm-exporter's
//! read/write timeouts are 10 s), one request per connection. The scrape rate is bounded too:
//! a page is rendered at most once per cache period; scrapes within it share that page.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub const MAX_REQUEST: usize = 8192;
pub const IO_TIMEOUT: Duration = Duration::from_secs(10);
pub const MAX_CONNECTIONS: usize = 32;

type Render = Box<dyn Fn() -> String + Send + Sync>;

/// The metrics page, rendered on demand and shared for `cache_for`.
pub struct Endpoint {
    render: Render,
    cache_for: Duration,
    cache: Mutex<Option<(Instant, Arc<String>)>>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("cache_for", &self.cache_for)
            .finish_non_exhaustive()
    }
}

impl Endpoint {
    pub fn new(render: Render, cache_for: Duration) -> Endpoint {
        Endpoint {
            render,
            cache_for,
            cache: Mutex::new(None),
        }
    }

    /// The page: the cached one while it is fresh, else a new one (concurrent scrapes wait for
    /// one rendering instead of each making their own).
    pub fn metrics(&self) -> Arc<String> {
        let mut c = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((t, page)) = c.as_ref() {
            if t.elapsed() < self.cache_for {
                return Arc::clone(page);
            }
        }
        let page = Arc::new((self.render)());
        *c = Some((Instant::now(), Arc::clone(&page)));
        page
    }
}

/// A response: status code, content type, body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub code: u16,
    pub content_type: &'static str,
    pub body: Arc<String>,
}

fn text(code: u16, body: &str) -> Response {
    Response {
        code,
        content_type: "text/plain; charset=utf-8",
        body: Arc::new(body.to_string()),
    }
}

/// Routes one request line (`GET /metrics HTTP/1.1`).
pub fn route(ep: &Endpoint, request_line: &str) -> Response {
    let mut parts = request_line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    if method != "GET" && method != "HEAD" {
        return text(405, "only GET is supported\n");
    }
    match path {
        "/metrics" => Response {
            code: 200,
            content_type: "text/plain; version=0.0.4; charset=utf-8",
            body: ep.metrics(),
        },
        "/health" => text(200, "OK"),
        "/" => Response {
            code: 200,
            content_type: "text/html; charset=utf-8",
            body: Arc::new(
                "<html><head><title>GPU Exporter</title></head><body><h1>GPU Exporter</h1>\
                 <p><a href=\"/metrics\">Metrics</a></p></body></html>\n"
                    .into(),
            ),
        },
        _ => text(404, "not found; try /metrics or /health\n"),
    }
}

fn reason(code: u16) -> &'static str {
    match code {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        _ => "Internal Server Error",
    }
}

async fn read_head(sock: &mut TcpStream) -> Option<Vec<u8>> {
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    let read = async {
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") && !buf.windows(2).any(|w| w == b"\n\n") {
            let n = sock.read(&mut chunk).await.ok()?;
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
            if buf.len() > MAX_REQUEST {
                return None;
            }
        }
        Some(())
    };
    tokio::time::timeout(IO_TIMEOUT, read).await.ok()??;
    Some(buf)
}

async fn handle(ep: Arc<Endpoint>, mut sock: TcpStream) -> std::io::Result<()> {
    let head = read_head(&mut sock).await;
    let resp = match &head {
        Some(buf) => {
            let line = String::from_utf8_lossy(buf);
            let line = line.lines().next().unwrap_or("").to_string();
            let ep2 = Arc::clone(&ep);
            tokio::task::spawn_blocking(move || route(&ep2, &line))
                .await
                .unwrap_or_else(|_| text(500, "internal error\n"))
        }
        None => text(400, "bad request\n"),
    };
    let head_only = head.as_ref().is_some_and(|b| b.starts_with(b"HEAD "));
    let top = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        resp.code,
        reason(resp.code),
        resp.content_type,
        resp.body.len()
    );
    let write = async {
        sock.write_all(top.as_bytes()).await?;
        if !head_only {
            sock.write_all(resp.body.as_bytes()).await?;
        }
        sock.shutdown().await
    };
    tokio::time::timeout(IO_TIMEOUT, write)
        .await
        .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into()))
}

/// Serves `listener` forever.
pub async fn serve(listener: TcpListener, ep: Arc<Endpoint>) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        match listener.accept().await {
            Ok((sock, peer)) => {
                let Ok(permit) = Arc::clone(&slots).try_acquire_owned() else {
                    tracing::debug!(%peer, "too many HTTP connections; closing this one");
                    drop(sock);
                    continue;
                };
                let ep = Arc::clone(&ep);
                tokio::spawn(async move {
                    if let Err(e) = handle(ep, sock).await {
                        tracing::debug!(%peer, error = %e, "http connection");
                    }
                    drop(permit);
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

#[cfg(test)]
#[path = "http_tests.rs"]
mod tests;
