//! A tiny GET-only HTTP/1.1 server: `/healthz`, `/readyz`, `/status`, `/metrics`.
//!
//! Kubelet probes and `curl` need three read-only endpoints; a hand-written server on tokio's
//! `TcpListener` keeps the binary small (no hyper stack). Each connection handles one request
//! with a bounded read, then closes.
//!
//! A flood must cost a bounded number of fds and never starve the supervisors (a probe that
//! cannot get an fd is inconclusive, not a dead daemon, but fds are still needed to run it):
//! at most [`MAX_CONNECTIONS`] connections are served at once, one beyond that is closed as
//! soon as it is accepted, a request is at most [`MAX_REQUEST`] bytes, and a connection gets
//! [`READ_TIMEOUT`] to send it and [`WRITE_TIMEOUT`] to take the answer.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::status::Board;

pub const MAX_REQUEST: usize = 8192;
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections served at once (a kubelet probe and a scraper need a few).
pub const MAX_CONNECTIONS: usize = 32;

/// A response: status code, content type, body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub code: u16,
    pub content_type: &'static str,
    pub body: String,
}

fn text(code: u16, body: impl Into<String>) -> Response {
    Response {
        code,
        content_type: "text/plain; charset=utf-8",
        body: body.into(),
    }
}

/// Routes one request line (`GET /readyz HTTP/1.1`).
pub fn route(board: &Board, request_line: &str) -> Response {
    let mut parts = request_line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    if method != "GET" && method != "HEAD" {
        return text(405, "only GET is supported\n");
    }
    match path {
        "/healthz" => text(200, "ok\n"),
        "/readyz" => {
            let (total, not_ready) = board.not_ready();
            if total == 0 && board.is_idle() {
                text(
                    200,
                    "ready: no GPU is shared with MPS in the config; nothing to run\n",
                )
            } else if total > 0 && not_ready.is_empty() {
                text(200, format!("ready: {total} GPU(s)\n"))
            } else {
                let mut body = format!("not ready: {} of {total} GPU(s)\n", not_ready.len());
                for g in not_ready {
                    body.push_str(&format!(
                        "{} (index {}): {}{}\n",
                        g.uuid,
                        g.index,
                        g.state.as_str(),
                        g.last_error.map(|e| format!(" - {e}")).unwrap_or_default()
                    ));
                }
                text(503, body)
            }
        }
        "/status" => match serde_json::to_string_pretty(&board.snapshot()) {
            Ok(body) => Response {
                code: 200,
                content_type: "application/json",
                body,
            },
            Err(e) => text(500, format!("{e}\n")),
        },
        "/metrics" => Response {
            code: 200,
            content_type: "text/plain; version=0.0.4; charset=utf-8",
            body: crate::metrics::render(board),
        },
        _ => text(
            404,
            "not found; try /healthz, /readyz, /status or /metrics\n",
        ),
    }
}

fn reason(code: u16) -> &'static str {
    match code {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        503 => "Service Unavailable",
        _ => "Internal Server Error",
    }
}

async fn handle(board: Board, mut sock: TcpStream) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    let read = async {
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") && !buf.windows(2).any(|w| w == b"\n\n") {
            let n = sock.read(&mut chunk).await?;
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
            if buf.len() > MAX_REQUEST {
                break;
            }
        }
        Ok::<_, std::io::Error>(())
    };
    let resp = match tokio::time::timeout(READ_TIMEOUT, read).await {
        Ok(Ok(())) if buf.len() <= MAX_REQUEST => {
            let head = String::from_utf8_lossy(&buf);
            route(&board, head.lines().next().unwrap_or(""))
        }
        _ => text(400, "bad request\n"),
    };
    let head_only = buf.starts_with(b"HEAD ");
    let mut out = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        resp.code,
        reason(resp.code),
        resp.content_type,
        resp.body.len()
    );
    if !head_only {
        out.push_str(&resp.body);
    }
    let write = async {
        sock.write_all(out.as_bytes()).await?;
        sock.shutdown().await
    };
    tokio::time::timeout(WRITE_TIMEOUT, write)
        .await
        .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into()))
}

/// `--listen` could not be bound (the I/O error is part of the message).
#[derive(Debug, thiserror::Error)]
#[error("cannot listen on {addr}: {error}; pick another --listen address")]
pub struct ListenError {
    pub addr: SocketAddr,
    pub error: std::io::Error,
}

/// Binds `addr` (errors name it) and serves forever on the returned task.
pub async fn serve(
    addr: SocketAddr,
    board: Board,
) -> Result<tokio::task::JoinHandle<()>, ListenError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|error| ListenError { addr, error })?;
    let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    Ok(tokio::spawn(async move {
        loop {
            match listener.accept().await {
                Ok((sock, peer)) => {
                    let Ok(permit) = slots.clone().try_acquire_owned() else {
                        tracing::debug!(%peer, "too many HTTP connections; closing this one");
                        drop(sock);
                        continue;
                    };
                    let b = board.clone();
                    tokio::spawn(async move {
                        if let Err(e) = handle(b, sock).await {
                            tracing::debug!(error = %e, "http connection");
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
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::{GpuState, GpuStatus};

    fn gpu(uuid: &str, state: GpuState) -> GpuStatus {
        GpuStatus {
            uuid: uuid.into(),
            index: 0,
            resource: "r".into(),
            replicas: 2,
            state,
            pid: None,
            active_thread_percentage: 50,
            pinned_memory_limit_mib: None,
            applied_active_thread_percentage: None,
            applied_pinned_memory_limit_mib: None,
            restarts: 0,
            last_error: Some("boom".into()),
            last_error_at: None,
            ready_since: None,
            pipe_directory: String::new(),
            log_directory: String::new(),
            shm_directory: None,
            usage: Default::default(),
        }
    }

    #[tokio::test]
    async fn readyz_lists_not_ready_gpus_over_tcp() {
        let board = Board::default();
        board.insert(gpu("GPU-a", GpuState::Ready));
        board.insert(gpu("GPU-b", GpuState::Restarting));
        assert_eq!(route(&board, "GET /healthz HTTP/1.1").code, 200);
        assert_eq!(route(&board, "POST /readyz HTTP/1.1").code, 405);
        assert_eq!(route(&board, "GET /nope HTTP/1.1").code, 404);
        let r = route(&board, "GET /readyz HTTP/1.1");
        assert_eq!(r.code, 503);
        assert!(
            r.body.contains("GPU-b (index 0): restarting - boom"),
            "{}",
            r.body
        );
        assert!(!r.body.contains("GPU-a"));

        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let _srv = serve(addr, board.clone()).await.unwrap();
        board.update("GPU-b", |s| s.state = GpuState::Ready);
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
        assert!(out.ends_with("ready: 2 GPU(s)\n"), "{out}");
    }
}
