//! Benchmarks (numbers printed, nothing asserted): start-to-ready for 8 GPUs (dgx-h100 shape),
//! crash latency (`kill -9` of one control daemon until its limits are back: a new daemon's
//! ready file, written only after the limits were read back), and the daemon's resident memory.
//! Everything runs with the default `probeInterval` (5 s): a crash must not wait for a probe.
//!
//! `cargo bench -p gpu-mps-daemon` (set GPUHOOK_SIM_MPS_CONTROL when the simulator is not next to
//! the daemon binary). Targets: <= 500 ms, <= 1 s, <= 20 MB.
//!
//! The first series uses a saved inventory (no NVML: compute modes untouched). When run as root
//! with `gpuhook-sim` and the mock NVML built next to the daemon, a second series runs the same
//! on a `gpuhook-sim build dgx-h100` node, where every start and restart is fenced by compute
//! mode PROHIBITED until the limits are read back (NVML calls included in the figures).
// Test support: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::*;

fn vm_rss_kib(pid: i32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn stats(name: &str, mut v: Vec<Duration>) {
    v.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "{name}: min {:.1} ms, median {:.1} ms, max {:.1} ms ({} runs)",
        ms(v[0]),
        ms(v[v.len() / 2]),
        ms(v[v.len() - 1]),
        v.len()
    );
}

/// A dgx-h100 simulated node (discovery, mock NVML) sharing every GPU 4 ways, when it can be
/// built here (root, `gpuhook-sim` next to the daemon binary).
fn nvml_node() -> Option<(tempfile::TempDir, std::path::PathBuf)> {
    let tool = daemon_bin().with_file_name("gpuhook-sim");
    if !nix::unistd::geteuid().is_root() || !tool.exists() {
        println!("(no NVML series: needs root and {})", tool.display());
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("node");
    let out = std::process::Command::new(&tool)
        .args(["build", "dgx-h100"])
        .arg(&root)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cfg = dir.path().join("config.yaml");
    std::fs::write(
        &cfg,
        format!(
            "version: v1\nsharing:\n  mps:\n    resources:\n      - {{name: nvidia.com/gpu, replicas: 4, devices: all}}\nmpsDaemon:\n  mpsRoot: {}\n  driverRoot: {}\n  maxRestartBackoff: 1s\n  cdiSpecDir: {}\n",
            dir.path().join("mps").display(),
            root.display(),
            dir.path().join("cdi").display()
        ),
    )
    .unwrap();
    Some((dir, cfg))
}

/// Start-to-ready and crash recovery of GPU 3 with compute modes through NVML.
fn nvml_series(runs: usize) {
    let (mut starts, mut recoveries, mut fenced) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        let Some((dir, cfg)) = nvml_node() else {
            return;
        };
        let port = free_port();
        let t0 = Instant::now();
        let child = std::process::Command::new(daemon_bin())
            .arg("--config")
            .arg(&cfg)
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .stderr(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let d = Daemon {
            child,
            port,
            log: dir.path().join("none"),
        };
        wait_for("readyz", || (d.get("/readyz").0 == 200).then_some(()));
        starts.push(t0.elapsed());
        let status = || -> Option<serde_json::Value> {
            let t = std::fs::read(dir.path().join("mps/status.json")).ok()?;
            serde_json::from_slice::<serde_json::Value>(&t).ok()?["gpus"]
                .as_array()?
                .get(3)
                .cloned()
        };
        let g = wait_for("GPU 3 in status.json", || {
            status().filter(|g| g["state"] == "ready")
        });
        let old = g["pid"].as_i64().unwrap();
        let ready = dir
            .path()
            .join("mps")
            .join(g["uuid"].as_str().unwrap())
            .join("ready");
        let t1 = Instant::now();
        // SAFETY: SIGKILL to a simulated control daemon.
        unsafe { libc::kill(i32::try_from(old).expect("a pid"), libc::SIGKILL) };
        // The mock NVML's record of the GPU's mode: 2 is PROHIBITED (the window is closed).
        let mode = dir
            .path()
            .join("node/usr/lib/x86_64-linux-gnu/gpuhook-sim-state")
            .join(format!("compute-mode-{}", g["uuid"].as_str().unwrap()));
        wait_for("PROHIBITED", || {
            let m = std::fs::read_to_string(&mode).unwrap_or_default();
            (m.trim() == "2").then_some(())
        });
        fenced.push(t1.elapsed());
        wait_for("recovery", || {
            status().filter(|g| {
                g["state"] == "ready" && g["pid"].as_i64() != Some(old) && ready.exists()
            })
        });
        recoveries.push(t1.elapsed());
        drop(d);
    }
    stats(
        "NVML node: start-to-ready, 8 GPUs, fenced (target <= 500 ms)",
        starts,
    );
    stats(
        "NVML node: kill -9 to compute mode PROHIBITED (the unfenced window)",
        fenced,
    );
    stats(
        "NVML node: kill -9 to limits back, PROHIBITED in between (target <= 1000 ms)",
        recoveries,
    );
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let runs = 5;
    let mut start_times = Vec::new();
    let mut recoveries = Vec::new();
    let mut rss = Vec::new();
    for _ in 0..runs {
        let node = Node::new(8, 81559);
        node.write_config(
            "      - {name: nvidia.com/gpu, replicas: 4, devices: all}\n",
            "  maxRestartBackoff: 1s\n",
        );
        let t0 = Instant::now();
        let d = node.start();
        wait_for("readyz", || (d.get("/readyz").0 == 200).then_some(()));
        start_times.push(t0.elapsed());
        rss.push(vm_rss_kib(d.pid()));

        let old = node.gpu_status(3).unwrap()["pid"].as_i64().unwrap();
        let t1 = Instant::now();
        // SAFETY: SIGKILL to a simulated control daemon.
        unsafe { libc::kill(i32::try_from(old).expect("a pid"), libc::SIGKILL) };
        wait_for("recovery", || {
            node.gpu_status(3).filter(|g| {
                g["state"] == "ready"
                    && g["pid"].as_i64() != Some(old)
                    && node.ready_file(3).exists()
            })
        });
        recoveries.push(t1.elapsed());
        rss.push(vm_rss_kib(d.pid()));
    }
    println!("gpu-mps-daemon benchmarks (simulated control daemons, default probeInterval 5s)");
    stats("start-to-ready, 8 GPUs (target <= 500 ms)", start_times);
    stats(
        "kill -9 of one control daemon to its limits back (target <= 1000 ms)",
        recoveries,
    );
    let max = rss.iter().max().copied().unwrap_or(0);
    println!(
        "daemon VmRSS: max {:.1} MB over {} samples (target <= 20 MB)",
        max as f64 / 1024.0,
        rss.len()
    );
    nvml_series(runs);
}
