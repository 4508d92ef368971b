//! A control daemon that dies is noticed when it dies (its child pidfd), not at the next health
//! probe: with a probe interval of an hour, `kill -9` of the control daemon still gets the GPU
//! restarted and its limits applied again, and no client ever attaches without them.
//! (Latency figures: `cargo bench -p gpu-mps-daemon`; this test asserts no timing.)
// Integration tests: a failed unwrap is the test failure, with its location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;

#[test]
fn a_killed_control_daemon_is_restarted_without_waiting_for_a_probe() {
    let node = Node::new(1, 24000);
    node.write_config(
        "      - {name: r, replicas: 4, devices: all}\n",
        "  probeInterval: 1h\n  maxRestartBackoff: 100ms\n",
    );
    let d = node.start();
    let old = node.wait_ready(0)["pid"].as_i64().unwrap();
    // SAFETY: SIGKILL to the simulated control daemon the test's daemon started.
    unsafe { libc::kill(i32::try_from(old).unwrap(), libc::SIGKILL) };
    // With the old code the next look at the daemon is an hour away: this wait (30 s) fails.
    let g = wait_for("GPU 0 ready again with a new control daemon", || {
        node.gpu_status(0).filter(|g| {
            g["state"] == "ready"
                && g["pid"].as_i64().is_some_and(|p| p != old)
                && node.ready_file(0).exists()
        })
    });
    assert_eq!(g["restarts"], 1, "{g}; log:\n{}", d.log_text());
    assert!(
        g["lastError"]
            .as_str()
            .is_some_and(|e| e.contains(&format!("pid {old}")) && e.contains("exited")),
        "{g}"
    );
    let got = node.client_limits(0);
    assert!(
        got.contains(" active_thread_percentage=25.0 pinned_mem_limit=0=6000M"),
        "{got}; log:\n{}",
        d.log_text()
    );
}
