//! Benchmarks (numbers printed, nothing asserted): start-to-ready for 8 GPUs (dgx-h100 shape),
//! crash latency (`kill -9` of one control daemon until its limits are back: a new daemon's
//! ready file, written only after the limits were read back), and the daemon's resident memory.
//! Everything runs with the default `probeInterval` (5 s): a crash must not wait for a probe.
//!
//! `cargo bench -p gpu-mps-daemon` (set GPUHOOK_SIM_MPS_CONTROL when the simulator is not next to
//! the daemon binary). Targets: <= 500 ms, <= 1 s, <= 20 MB.
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
}
