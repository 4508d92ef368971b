//! gpu-mps-daemon against the nvidia-cuda-mps-control simulator: readiness only after limits,
//! crash and wedge recovery, SIGTERM cleanup (SIGHUP reload and instances: `daemon_reload.rs`).
// Test support: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::Value;

const FAST: &str = "  probeInterval: 300ms\n  commandTimeout: 5s\n  maxRestartBackoff: 1s\n";

fn pid_of(g: &Value) -> i64 {
    g["pid"].as_i64().expect("pid")
}

#[test]
fn limits_are_applied_before_the_gpu_is_ready() {
    let node = Node::new(2, 81920);
    node.write_config(
        "      - {name: nvidia.com/gpu, replicas: 4, devices: all}\n",
        FAST,
    );
    let d = node.start();
    // A client that connects the moment the ready file appears must see the limits.
    for i in 0..2 {
        wait_for("ready file", || node.ready_file(i).exists().then_some(()));
        let got = node.client_limits(i);
        assert!(
            got.contains("active_thread_percentage=25.0 pinned_mem_limit=0=20480M"),
            "GPU {i}: client saw {got:?}; daemon log:\n{}",
            d.log_text()
        );
    }
    let g = node.wait_ready(1);
    assert_eq!(g["activeThreadPercentage"], 25);
    assert_eq!(g["pinnedMemoryLimitMiB"], 20480);
    assert_eq!(g["appliedPinnedMemoryLimitMiB"], 20480);
    assert_eq!(g["restarts"], 0);
    let ready: Value = serde_json::from_slice(&std::fs::read(node.ready_file(1)).unwrap()).unwrap();
    assert_eq!(ready["pid"], g["pid"]);
    assert_eq!(
        wait_for("readyz 200", || Some(d.get("/readyz"))
            .filter(|r| r.0 == 200))
        .1,
        "ready: 2 GPU(s)\n"
    );
    assert_eq!(d.get("/healthz").0, 200);

    // The control daemon sees only its GPU and a clean environment.
    let environ = std::fs::read(format!("/proc/{}/environ", pid_of(&g))).unwrap();
    let vars: Vec<String> = environ
        .split(|b| *b == 0)
        .filter(|v| !v.is_empty())
        .map(|v| String::from_utf8_lossy(v).to_string())
        .collect();
    assert!(
        vars.contains(&format!("CUDA_VISIBLE_DEVICES={}", uuid(1))),
        "{vars:?}"
    );
    assert!(
        vars.contains(&format!(
            "CUDA_MPS_PIPE_DIRECTORY={}",
            node.pipe(1).display()
        )),
        "{vars:?}"
    );
    assert!(
        !vars
            .iter()
            .any(|v| v.starts_with("GPUHOOK_TEST_MARKER") || v.starts_with("RUST_LOG")),
        "{vars:?}"
    );

    // `status` subcommand: table and JSON.
    let out = std::process::Command::new(daemon_bin())
        .args(["status", "--mps-root"])
        .arg(&node.mps_root)
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{table}");
    assert!(
        table.contains("STATE") && table.contains(&uuid(0)) && table.contains("ready"),
        "{table}"
    );
    assert!(table.contains("20480M"), "{table}");
    let out = std::process::Command::new(daemon_bin())
        .args(["status", "--json", "--mps-root"])
        .arg(&node.mps_root)
        .output()
        .unwrap();
    let js: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(js["gpus"].as_array().unwrap().len(), 2);
    assert_eq!(js["pid"], d.pid());
}

#[test]
fn slow_commands_and_a_driver_ignoring_uuid_limits_still_give_limited_clients() {
    // Every command takes 300 ms: a daemon that announced readiness before its limits were
    // applied would let this client in unlimited. The driver also ignores limits given by UUID,
    // so limits must be set by ordinal.
    let node = Node::new(1, 24000);
    node.wrap_control(
        "export GPUHOOK_SIM_MPS_FAULT=ignore-uuid-limits\n[ \"$#\" -eq 0 ] && sleep 0.3",
    );
    node.write_config(
        "      - {name: r, replicas: 3, devices: all}\n",
        "  probeInterval: 2s\n",
    );
    let d = node.start();
    wait_for("ready file", || node.ready_file(0).exists().then_some(()));
    let got = node.client_limits(0);
    assert!(
        got.contains("active_thread_percentage=33.0 pinned_mem_limit=0=8000M"),
        "{got}; log:\n{}",
        d.log_text()
    );
}

#[test]
fn a_driver_ignoring_limits_in_the_daemon_environment_still_gets_them_and_is_named() {
    let node = Node::new(1, 24000);
    node.wrap_control("export GPUHOOK_SIM_MPS_FAULT=ignore-env-limits");
    node.write_config("      - {name: r, replicas: 3, devices: all}\n", FAST);
    let d = node.start();
    wait_for("ready file", || node.ready_file(0).exists().then_some(()));
    let got = node.client_limits(0);
    assert!(
        got.contains("active_thread_percentage=33.0 pinned_mem_limit=0=8000M"),
        "{got}"
    );
    assert!(
        d.log_text()
            .contains("ignored CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"),
        "{}",
        d.log_text()
    );
}

#[test]
fn a_daemon_that_cannot_start_is_failed_and_not_ready() {
    let node = Node::new(1, 8192);
    node.wrap_control("[ \"$1\" = -f ] && { echo 'boom: no GPU here' >&2; exit 1; }");
    node.write_config("      - {name: r, replicas: 2, devices: all}\n", FAST);
    let d = node.start();
    let g = wait_for("retries", || {
        node.gpu_status(0)
            .filter(|g| g["restarts"].as_u64() >= Some(2))
    });
    assert!(
        g["lastError"]
            .as_str()
            .unwrap()
            .contains("boom: no GPU here"),
        "{g}"
    );
    assert!(!node.ready_file(0).exists());
    let (code, body) = d.get("/readyz");
    assert_eq!(code, 503, "{body}");
    assert!(
        body.contains(&uuid(0)) && body.contains("boom: no GPU here"),
        "{body}"
    );
}

#[test]
fn a_killed_control_daemon_is_restarted_with_limits() {
    let node = Node::new(1, 40000);
    node.write_config("      - {name: r, replicas: 3, devices: [0]}\n", FAST);
    let d = node.start();
    let old = pid_of(&node.wait_ready(0));
    let old_pid = i32::try_from(old).expect("a pid");
    // SAFETY: SIGKILL to the simulated control daemon.
    assert_eq!(unsafe { libc::kill(old_pid, libc::SIGKILL) }, 0);
    let g = wait_for("restart", || {
        node.gpu_status(0).filter(|g| {
            g["state"] == "ready" && g["pid"].as_i64() != Some(old) && node.ready_file(0).exists()
        })
    });
    assert!(g["restarts"].as_u64().unwrap() >= 1);
    assert!(
        g["lastError"]
            .as_str()
            .unwrap()
            .contains(&format!("pid {old}")),
        "{g}"
    );
    let got = node.client_limits(0);
    assert!(
        got.contains("active_thread_percentage=33.0 pinned_mem_limit=0=13333M"),
        "{got}; log:\n{}",
        d.log_text()
    );
}

#[test]
fn a_wedged_control_daemon_is_killed_and_restarted() {
    let node = Node::new(1, 16384);
    node.write_config("      - {name: r, replicas: 2, devices: [0]}\n", FAST);
    let d = node.start();
    let old = pid_of(&node.wait_ready(0));
    // The wedge command itself gets no reply: the client waits until the daemon is killed.
    let wedger = std::thread::spawn({
        let pipe = node.pipe(0);
        move || control_at(&pipe, "sim_wedge")
    });
    let g = wait_for("restart after wedge", || {
        node.gpu_status(0)
            .filter(|g| g["state"] == "ready" && g["pid"].as_i64() != Some(old))
    });
    assert!(
        g["lastError"].as_str().unwrap().contains("no reply within"),
        "{g}"
    );
    assert!(!alive(old), "the wedged daemon {old} must be killed");
    assert!(
        !wedger.join().unwrap().status.success(),
        "the wedged daemon never answered"
    );
    assert!(
        node.client_limits(0)
            .contains("active_thread_percentage=50.0"),
        "log:\n{}",
        d.log_text()
    );
}

#[test]
fn sigterm_quits_daemons_and_leaves_the_root_as_it_was() {
    let node = Node::new(2, 8192);
    std::fs::create_dir_all(&node.mps_root).unwrap();
    std::fs::write(node.mps_root.join("keep.txt"), "mine").unwrap();
    let root_user = nix::unistd::geteuid().is_root();
    let shm = if root_user { "  shmSize: 16Mi\n" } else { "" };
    node.write_config(
        "      - {name: r, replicas: 2, devices: all}\n",
        &format!("{FAST}{shm}"),
    );
    let mut d = node.start();
    let pids: Vec<i64> = (0..2).map(|i| pid_of(&node.wait_ready(i))).collect();
    let shm_dir = node.mps_root.join(uuid(0)).join("shm");
    let mounted = || {
        std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .any(|l| l.split_whitespace().nth(4) == Some(shm_dir.to_str().unwrap()))
    };
    if root_user {
        assert!(mounted(), "tmpfs must be mounted on {}", shm_dir.display());
        let environ = std::fs::read_to_string(format!("/proc/{}/mountinfo", pids[0])).unwrap();
        assert!(
            environ
                .lines()
                .any(|l| l.split_whitespace().nth(4) == Some("/dev/shm") && l.contains("tmpfs")),
            "the control daemon must see the shared tmpfs as /dev/shm"
        );
    }
    assert!(node.mps_root.join(".lock").exists() && node.mps_root.join("status.json").exists());
    d.signal(libc::SIGTERM);
    assert_eq!(d.wait_exit(), Some(0), "log:\n{}", d.log_text());
    for p in pids {
        assert!(!alive(p), "control daemon {p} still runs");
    }
    assert_eq!(tree(&node.mps_root), vec!["keep.txt".to_string()]);
    assert!(!mounted());
    assert!(
        d.log_text().contains("control daemon quit"),
        "{}",
        d.log_text()
    );
}

#[test]
fn sigterm_stops_a_daemon_whose_pid_file_was_deleted() {
    let node = Node::new(1, 8192);
    node.write_config(
        "      - {name: r, replicas: 2, devices: all}\n",
        "  probeInterval: 30s\n",
    );
    let mut d = node.start();
    let pid = pid_of(&node.wait_ready(0));
    std::fs::remove_dir_all(node.pipe(0)).unwrap();
    d.signal(libc::SIGTERM);
    assert_eq!(d.wait_exit(), Some(0), "log:\n{}", d.log_text());
    assert!(!alive(pid), "control daemon {pid} must not be orphaned");
}

#[test]
fn sigterm_removes_a_root_it_created() {
    let node = Node::new(1, 8192);
    node.write_config("      - {name: r, replicas: 2, devices: all}\n", FAST);
    let mut d = node.start();
    node.wait_ready(0);
    d.signal(libc::SIGTERM);
    assert_eq!(d.wait_exit(), Some(0));
    assert!(!node.mps_root.exists(), "{:?}", tree(&node.mps_root));
}
