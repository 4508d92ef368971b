//! Clients of two users on one GPU: NVIDIA's control daemon runs one user's server at a time,
//! so the second user's client waits until every client of the first is done
//! (`nvidia-cuda-mps-control(1)`). The daemon reports each server's user and the waiting client
//! (`status.json` `usage.serverUsers` / `usage.waitingClients`, `gpuhook_mps_waiting_clients`,
//! one WARN line). Clients run as real users (`setpriv`), as containers of those users would.
// Integration tests: a failed unwrap is the test failure, with its location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Command, Stdio};

use common::*;
use serde_json::json;

/// A simulated CUDA client of GPU 0 running as `uid` (its own pid is its client pid).
fn client_as(node: &Node, uid: u32, hold: &str) -> (Child, BufReader<std::process::ChildStdout>) {
    let id = uid.to_string();
    let mut c = Command::new("setpriv")
        .args(["--reuid", &id, "--regid", &id, "--clear-groups"])
        .arg(sim_bin())
        .args(["--sim-client", "--hold", hold])
        .env_clear()
        .env("CUDA_MPS_PIPE_DIRECTORY", node.pipe(0))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = BufReader::new(c.stdout.take().unwrap());
    (c, out)
}

fn line(r: &mut BufReader<std::process::ChildStdout>) -> String {
    let mut l = String::new();
    r.read_line(&mut l).unwrap();
    l.trim_end().to_string()
}

/// The first line that is not `pending` (a server starting for the client).
fn attached(r: &mut BufReader<std::process::ChildStdout>) -> String {
    loop {
        let l = line(r);
        if l != "pending" {
            return l;
        }
    }
}

#[test]
fn a_client_of_another_user_waits_and_is_reported() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root to run clients as other users");
        return;
    }
    let node = Node::new(1, 24000);
    std::fs::set_permissions(node.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    node.write_config(
        "      - {name: r, replicas: 4, devices: all}\n",
        "  probeInterval: 200ms\n",
    );
    let d = node.start();
    node.wait_ready(0);
    let (mut a, mut a_out) = client_as(&node, 1000, "600");
    let a_line = attached(&mut a_out);
    assert!(
        a_line.starts_with("server="),
        "{a_line}; log:\n{}",
        d.log_text()
    );
    let (mut b, mut b_out) = client_as(&node, 2000, "0");
    assert_eq!(line(&mut b_out), "pending");
    let want = json!([{"pid": b.id(), "uid": 2000, "waitsForUids": [1000]}]);
    let g = wait_for("the waiting client in status.json", || {
        node.gpu_status(0)
            .filter(|g| g["usage"]["waitingClients"] == want)
    });
    let users = g["usage"]["serverUsers"].as_object().unwrap();
    assert_eq!(users.values().collect::<Vec<_>>(), [&json!(1000)], "{g}");
    let text = d.get("/metrics").1;
    assert_eq!(
        metric(&text, "gpuhook_mps_waiting_clients", &[]),
        Some(1.0),
        "{text}"
    );
    assert!(
        d.log_text()
            .lines()
            .any(|l| l.contains("MPS client waits") && l.contains("uid=2000")),
        "{}",
        d.log_text()
    );
    // The first user's client ends: the second one's server starts, as uid 2000.
    a.kill().unwrap();
    a.wait().unwrap();
    let b_line = attached(&mut b_out);
    assert!(b_line.starts_with("server="), "{b_line}");
    let g = wait_for("no client waiting", || {
        node.gpu_status(0).filter(|g| {
            g["usage"]["waitingClients"] == json!([])
                && g["usage"]["serverUsers"]
                    .as_object()
                    .is_some_and(|u| u.values().all(|v| *v == 2000) && !u.is_empty())
        })
    });
    assert_eq!(
        metric(&d.get("/metrics").1, "gpuhook_mps_waiting_clients", &[]),
        Some(0.0),
        "{g}"
    );
    let _ = b.wait();
}
