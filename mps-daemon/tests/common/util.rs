//! Helpers that need no [`super::Node`]: HTTP, metrics, waiting, processes, file trees.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{sim_bin, WAIT};

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Sends one command to GPU `i`'s control daemon without waiting for the reply (a command
/// that never answers, like `sim_wedge`); the client is killed after `secs`.
pub fn control_detached(pipe: &Path, cmd: &str, secs: u64) {
    let mut child = Command::new(sim_bin())
        .env_clear()
        .env("CUDA_MPS_PIPE_DIRECTORY", pipe)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    use std::io::Write;
    let _ = child
        .stdin
        .as_mut()
        .unwrap()
        .write_all(format!("{cmd}\n").as_bytes());
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(secs));
        let _ = child.kill();
        let _ = child.wait();
    });
}

/// Value of the sample `name` whose labels include `labels`, parsing the exposition.
pub fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let samples = gpu_mps_daemon::metrics_parse::parse_text(text).ok()?;
    samples
        .into_iter()
        .find(|s| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.value)
}

pub fn http_get(port: u16, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return (0, String::new());
    };
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let code = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (code, body)
}

/// Polls `f` until it returns `Some` (bounded by [`WAIT`]).
pub fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(start.elapsed() < WAIT, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

pub fn alive(pid: i64) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    !matches!(
        stat.rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().next()),
        Some("Z" | "X")
    )
}

/// Every path under `root`, relative, sorted.
pub fn tree(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            out.push(p.strip_prefix(base).unwrap().display().to_string());
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                walk(base, &p, out);
            }
        }
    }
    walk(root, root, &mut out);
    out.sort();
    out
}
