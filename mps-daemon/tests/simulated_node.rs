//! gpu-mps-daemon on a full simulated node (`gpuhook-sim build dgx-h100`): GPU facts from
//! discovery and compute modes through the node's (mock) NVML, as on a real node.
//!
//! Needs root (the node has device nodes) and the workspace's `gpuhook-sim` binary; skipped
//! with a message otherwise, unless GPUHOOK_REQUIRE_E2E=1 makes that a failure.
// Test support: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::*;

fn sim_node_tool() -> Option<PathBuf> {
    let p = std::env::var_os("GPUHOOK_SIM_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| daemon_bin().with_file_name("gpuhook-sim"));
    p.exists().then_some(p)
}

fn ready_to_run() -> Option<PathBuf> {
    let required = std::env::var("GPUHOOK_REQUIRE_E2E").is_ok_and(|v| v == "1");
    let tool = sim_node_tool();
    let why = if !nix::unistd::geteuid().is_root() {
        "needs root"
    } else if tool.is_none() {
        "gpuhook-sim is not built (cargo build --workspace, or set GPUHOOK_SIM_BIN)"
    } else {
        return tool;
    };
    assert!(!required, "simulated-node test cannot run: {why}");
    eprintln!("SKIP simulated-node test: {why}");
    None
}

fn compute_modes(driver_root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in walk_files(driver_root) {
        if e.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("compute-mode-GPU-"))
        {
            out.push(std::fs::read_to_string(&e).unwrap().trim().to_string());
        }
    }
    out
}

fn walk_files(dir: &Path) -> Vec<PathBuf> {
    tree(dir)
        .into_iter()
        .map(|p| dir.join(p))
        .filter(|p| p.symlink_metadata().map(|m| m.is_file()).unwrap_or(false))
        .collect()
}

#[test]
fn dgx_h100_node_with_discovery_and_nvml() {
    let Some(tool) = ready_to_run() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (root, mps, cfg) = (
        dir.path().join("node"),
        dir.path().join("mps"),
        dir.path().join("config.yaml"),
    );
    build_node(&tool, &root, &mps, &cfg);
    let port = free_port();
    let log = dir.path().join("daemon.log");
    let child = Command::new(daemon_bin())
        .arg("--config")
        .arg(&cfg)
        .arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .stderr(std::fs::File::create(&log).unwrap())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    // Dropping the guard (also on a failed assertion) stops the daemon and its control daemons.
    let mut daemon = Daemon {
        child,
        port,
        log: log.clone(),
    };
    let logtext = || std::fs::read_to_string(&log).unwrap_or_default();
    wait_for("readyz", || {
        (http_get(port, "/readyz").0 == 200).then_some(())
    });
    // status.json is rewritten just after the in-memory state that /readyz reports.
    let status = wait_for("status.json all ready", || {
        let text = std::fs::read(mps.join("status.json")).ok()?;
        let s: serde_json::Value = serde_json::from_slice(&text).ok()?;
        s["gpus"]
            .as_array()?
            .iter()
            .all(|g| g["state"] == "ready")
            .then_some(s)
    });
    ready_and_limited(&status, &root, &mps, &logtext());

    daemon.signal(libc::SIGTERM);
    assert_eq!(daemon.wait_exit(), Some(0), "{}", logtext());
    assert!(!mps.exists(), "{:?}", tree(&mps));
    assert_eq!(
        compute_modes(&root),
        vec!["0".to_string(); 8],
        "compute modes restored"
    );
}

/// The dgx-h100 node under `root`, and a config sharing all its GPUs 4 ways with MPS root `mps`.
fn build_node(tool: &Path, root: &Path, mps: &Path, cfg: &Path) {
    let out = Command::new(tool)
        .args(["build", "dgx-h100"])
        .arg(root)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cdi = cfg.with_file_name("cdi");
    std::fs::write(
        cfg,
        format!(
            "version: v1\nsharing:\n  mps:\n    resources:\n      - {{name: nvidia.com/gpu, replicas: 4, devices: all}}\nmpsDaemon:\n  mpsRoot: {}\n  driverRoot: {}\n  probeInterval: 1s\n  cdiSpecDir: {}\n",
            mps.display(),
            root.display(),
            cdi.display()
        ),
    )
    .unwrap();
}

/// All 8 GPUs ready with a quarter each, in EXCLUSIVE_PROCESS mode, and a client of GPU 5
/// (through the node's own control binary) gets those limits.
fn ready_and_limited(status: &serde_json::Value, root: &Path, mps: &Path, log: &str) {
    let gpus = status["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 8, "{status}");
    for g in gpus {
        assert_eq!(g["state"], "ready");
        assert_eq!(g["activeThreadPercentage"], 25);
        assert!(g["pinnedMemoryLimitMiB"].as_u64().unwrap() > 10_000, "{g}");
    }
    assert_eq!(
        compute_modes(root),
        vec!["3".to_string(); 8],
        "EXCLUSIVE_PROCESS while running; log:\n{log}"
    );
    let uuid5 = gpus[5]["uuid"].as_str().unwrap();
    let client = Command::new(root.join("usr/bin/nvidia-cuda-mps-control"))
        .env_clear()
        .env("CUDA_MPS_PIPE_DIRECTORY", mps.join(uuid5).join("pipe"))
        .args(["--sim-client", "--uid", "0", "--hold", "0"])
        .output()
        .unwrap();
    let seen = String::from_utf8_lossy(&client.stdout);
    let want = format!(
        "active_thread_percentage=25.0 pinned_mem_limit=0={}M",
        gpus[5]["pinnedMemoryLimitMiB"]
    );
    assert!(seen.contains(&want), "{seen}");
}
