//! An MPS tenant against gpu-mps-daemon: everything a container can reach is the pipe directory
//! (read-write) and the control socket in it. Nothing it does there may steer the daemon
//! (signal another GPU's daemon, freeze it, redirect its commands), let a client run without
//! limits, or change the limits for good.
// Test support: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

const FAST: &str = "  probeInterval: 300ms\n  commandTimeout: 5s\n  maxRestartBackoff: 1s\n";

fn pid_of(g: &Value) -> i64 {
    g["pid"].as_i64().expect("pid")
}

/// Waits until GPU `i` is ready again under a daemon other than `old`.
fn wait_restarted(node: &Node, i: u32, old: i64) -> Value {
    wait_for(&format!("GPU {i} restarted"), || {
        node.gpu_status(i).filter(|g| {
            g["state"] == "ready" && g["pid"].as_i64() != Some(old) && node.ready_file(i).exists()
        })
    })
}

#[test]
fn a_rewritten_pid_file_never_makes_us_signal_another_gpus_daemon() {
    let node = Node::new(2, 16000);
    node.write_config("      - {name: r, replicas: 2, devices: all}\n", FAST);
    let d = node.start();
    let old0 = pid_of(&node.wait_ready(0));
    let victim = pid_of(&node.wait_ready(1));
    // GPU 0's tenant names GPU 1's control daemon in GPU 0's pid file, then crashes GPU 0's.
    std::fs::write(
        node.pipe(0).join("nvidia-cuda-mps-control.pid"),
        format!("{victim}\n"),
    )
    .unwrap();
    node.control(0, "sim_crash");
    wait_restarted(&node, 0, old0);
    std::thread::sleep(Duration::from_millis(700));
    let g1 = node.gpu_status(1).unwrap();
    assert!(
        alive(victim),
        "GPU 1's daemon was killed; log:\n{}",
        d.log_text()
    );
    assert_eq!(pid_of(&g1), victim, "{g1}");
    assert_eq!(g1["restarts"], 0, "{g1}");
}

#[test]
fn a_fifo_in_the_pipe_directory_freezes_nothing() {
    let node = Node::new(2, 16000);
    node.write_config("      - {name: r, replicas: 2, devices: all}\n", FAST);
    let d = node.start();
    let old0 = pid_of(&node.wait_ready(0));
    let old1 = pid_of(&node.wait_ready(1));
    // FIFOs where the daemon's pid file and the control socket's neighbours are, then a crash.
    for name in ["nvidia-cuda-mps-control.pid", "fifo"] {
        let p = node.pipe(0).join(name);
        let _ = std::fs::remove_file(&p);
        nix::unistd::mkfifo(&p, nix::sys::stat::Mode::from_bits_truncate(0o666)).unwrap();
    }
    node.control(0, "sim_crash");
    let start = Instant::now();
    // HTTP answers at once throughout, and both GPUs are supervised: 0 comes back, and a crash
    // of 1 is noticed and repaired too.
    while start.elapsed() < Duration::from_secs(2) {
        let t = Instant::now();
        assert_eq!(d.get("/healthz").0, 200, "log:\n{}", d.log_text());
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "healthz took {:?}",
            t.elapsed()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    wait_restarted(&node, 0, old0);
    node.control(1, "sim_crash");
    wait_restarted(&node, 1, old1);
}

#[test]
fn a_planted_control_socket_is_not_taken_for_the_daemon() {
    let node = Node::new(2, 16000);
    node.write_config("      - {name: r, replicas: 2, devices: all}\n", FAST);
    let d = node.start();
    let old0 = pid_of(&node.wait_ready(0));
    let g1 = node.wait_ready(1);
    // GPU 0's tenant points GPU 0's control socket at GPU 1's daemon: our commands for GPU 0
    // would reach GPU 1. The socket is known by who listens on it, so GPU 0 is restarted.
    let sock = node.pipe(0).join("control");
    std::fs::remove_file(&sock).unwrap();
    std::os::unix::fs::symlink(node.pipe(1).join("control"), &sock).unwrap();
    let g0 = wait_restarted(&node, 0, old0);
    assert!(
        g0["lastError"]
            .as_str()
            .unwrap_or("")
            .contains("control socket"),
        "{g0}; log:\n{}",
        d.log_text()
    );
    let now1 = node.gpu_status(1).unwrap();
    assert_eq!(now1["pid"], g1["pid"]);
    assert_eq!(now1["restarts"], 0);
}

/// Simulated CUDA clients of GPU 0 connecting as fast as they can; returns what each attached
/// client got, with the time it got it.
type Seen = Arc<Mutex<Vec<(Instant, String)>>>;

fn racers(node: &Node, stop: &Arc<AtomicBool>, seen: &Seen) -> Vec<std::thread::JoinHandle<()>> {
    (0..3)
        .map(|_| {
            let (stop, seen, pipe) = (stop.clone(), seen.clone(), node.pipe(0));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let mut child = Command::new(sim_bin())
                        .env_clear()
                        .env("CUDA_MPS_PIPE_DIRECTORY", &pipe)
                        .args(["--sim-client", "--uid", "0", "--hold", "0"])
                        .stdout(Stdio::piped())
                        .stderr(Stdio::null())
                        .spawn()
                        .unwrap();
                    let out = std::io::read_to_string(child.stdout.take().unwrap());
                    let _ = child.wait();
                    if let Some(l) = out
                        .unwrap_or_default()
                        .lines()
                        .find(|l| l.starts_with("server="))
                    {
                        seen.lock().unwrap().push((Instant::now(), l.to_string()));
                    }
                }
            })
        })
        .collect()
}

#[test]
fn no_client_runs_unlimited_while_a_control_daemon_restarts() {
    let node = Node::new(1, 24000);
    // Every command takes 300 ms: a wide window between a restarted daemon's start and the
    // moment its limits are set and read back.
    node.wrap_control("[ \"$#\" -eq 0 ] && sleep 0.3");
    node.write_config(
        "      - {name: r, replicas: 4, devices: all}\n",
        "  probeInterval: 300ms\n  commandTimeout: 5s\n  maxRestartBackoff: 100ms\n",
    );
    let d = node.start();
    let mut pid = pid_of(&node.wait_ready(0));
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Seen::default();
    let threads = racers(&node, &stop, &seen);
    let mut windows = Vec::new();
    for _ in 0..4 {
        let t0 = Instant::now();
        node.control(0, "sim_crash");
        pid = pid_of(&wait_restarted(&node, 0, pid));
        windows.push((t0, Instant::now()));
        std::thread::sleep(Duration::from_millis(300));
    }
    stop.store(true, Ordering::Relaxed);
    threads.into_iter().for_each(|t| t.join().unwrap());
    let seen = seen.lock().unwrap();
    let in_window = seen
        .iter()
        .filter(|(t, _)| windows.iter().any(|(a, b)| t >= a && t <= b))
        .count();
    assert!(
        in_window > 0,
        "no client raced a restart ({} attached)",
        seen.len()
    );
    let unlimited: Vec<&String> = seen
        .iter()
        .map(|(_, l)| l)
        .filter(|l| !l.ends_with("active_thread_percentage=25.0 pinned_mem_limit=0=6000M"))
        .collect();
    assert!(
        unlimited.is_empty(),
        "{} of {} clients ({in_window} during restarts) ran without the limits: {:?}; log:\n{}",
        unlimited.len(),
        seen.len(),
        unlimited.iter().take(5).collect::<Vec<_>>(),
        d.log_text()
    );
}

#[test]
fn limits_changed_through_the_pipe_directory_are_restored_and_counted() {
    let node = Node::new(1, 24000);
    node.write_config("      - {name: r, replicas: 4, devices: all}\n", FAST);
    let d = node.start();
    node.wait_ready(0);
    // A running client keeps a server up, so that its own limits can be changed too.
    let mut client = Command::new(sim_bin())
        .env_clear()
        .env("CUDA_MPS_PIPE_DIRECTORY", node.pipe(0))
        .args(["--sim-client", "--uid", "0", "--hold", "60"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let srv = wait_for("a limited server", || {
        let g = node.gpu_status(0)?;
        let s = g["usage"]["servers"].as_array()?.first()?.as_u64()?;
        (g["usage"]["serversLimited"].as_u64()? >= 1).then_some(s)
    });
    let ctl = |c: &str| {
        String::from_utf8_lossy(&node.control(0, c).stdout)
            .trim()
            .to_string()
    };
    ctl("set_default_active_thread_percentage 100");
    ctl(&format!("set_active_thread_percentage {srv} 100"));
    ctl(&format!("set_device_pinned_mem_limit {srv} 0 24000M"));
    wait_for("limits restored", || {
        (ctl("get_default_active_thread_percentage") == "25.0"
            && ctl(&format!("get_active_thread_percentage {srv}")) == "25.0"
            && ctl(&format!("get_device_pinned_mem_limit {srv} 0")) == "6000M")
            .then_some(())
    });
    let u = uuid(0);
    let drift = |scope: &str| {
        let m = d.get("/metrics").1;
        let labels = [("gpu", "0"), ("UUID", u.as_str()), ("scope", scope)];
        metric(&m, "gpuhook_mps_limit_drift_total", &labels)
    };
    wait_for("drift counted", || {
        (drift("default")? >= 1.0 && drift("server")? >= 1.0).then_some(())
    });
    let log = d.log_text();
    assert!(log.contains("changed through the pipe directory"), "{log}");
    let _ = client.kill();
    let _ = client.wait();
}
