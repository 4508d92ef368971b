//! The running daemon of `live.rs`: the node it runs on, its HTTP endpoint, and its stop on drop.

use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::live::l20_inventory;
use super::read;

pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let code = out.split_whitespace().nth(1)?.parse().ok()?;
    let body = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((code, body))
}

/// Stops the daemon with SIGTERM when the test ends, whatever happened.
pub struct Daemon(pub Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_some() {
            return;
        }
        // SIGTERM first: the daemon then stops its control daemons and unmounts its tmpfs. A
        // SIGKILL alone would leak both on the host when an assertion fails mid-test.
        if let Ok(pid) = i32::try_from(self.0.id()) {
            // SAFETY: kill(2) on the pid of our own child, which has not been reaped yet.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::time::Instant::now() < deadline {
            if self.0.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The daemon running on a temp-dir copy of the L20 node with the ConfigMap's L20 config, and
/// the paths the steps below read.
pub struct Live {
    _dir: tempfile::TempDir,
    pub daemon_bin: std::path::PathBuf,
    pub driver_root: std::path::PathBuf,
    pub mps_root: std::path::PathBuf,
    pub spec_file: std::path::PathBuf,
    pub log: std::path::PathBuf,
    pub port: u16,
}

impl Live {
    pub fn log_text(&self) -> String {
        read(&self.log)
    }

    /// `gpu-mps-daemon status` with `args`, against this MPS root.
    pub fn status(&self, args: &[&str]) -> String {
        let mut c = Command::new(&self.daemon_bin);
        c.arg("status")
            .arg("--mps-root")
            .arg(&self.mps_root)
            .args(args);
        gpuhook_e2e::run_ok(&mut c)
    }
}

/// Lays out the node (driver root with the simulated control binary, inventory, config, MPS
/// root) and starts the daemon on it as the DaemonSet does, with temp-dir paths.
pub fn start(text: &str) -> (Live, Daemon) {
    let daemon_bin = gpuhook_e2e::built("gpu-mps-daemon");
    let sim = gpuhook_e2e::built("sim-nvidia-cuda-mps-control");
    let dir = tempfile::tempdir().expect("tempdir");
    let driver_root = dir.path().join("driver");
    std::fs::create_dir_all(driver_root.join("usr/bin")).unwrap();
    std::os::unix::fs::symlink(&sim, driver_root.join("usr/bin/nvidia-cuda-mps-control")).unwrap();
    let inv = dir.path().join("inventory.json");
    std::fs::write(
        &inv,
        serde_json::to_vec(&l20_inventory(&driver_root)).unwrap(),
    )
    .unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, text).unwrap();
    let mps_root = dir.path().join("mps");
    std::fs::create_dir(&mps_root).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let log = dir.path().join("daemon.log");
    // The DaemonSet's /var/run/cdi; the daemon creates it.
    let cdi_dir = dir.path().join("cdi");
    let spec_file = cdi_dir.join("nvidia.com-gpu-mps.json");
    let child = Command::new(&daemon_bin)
        .arg("--config")
        .arg(&config)
        .arg("--driver-root")
        .arg(&driver_root)
        .arg("--mps-root")
        .arg(&mps_root)
        .arg("--inventory-json")
        .arg(&inv)
        .arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--cdi-spec-dir")
        .arg(&cdi_dir)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("start gpu-mps-daemon");
    let live = Live {
        _dir: dir,
        daemon_bin,
        driver_root,
        mps_root,
        spec_file,
        log,
        port,
    };
    (live, Daemon(child))
}
