//! gpu-mps-daemon against the nvidia-cuda-mps-control simulator: SIGHUP reload, a restarted
//! instance taking over, a second instance refused, config errors that start nothing.
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
fn sighup_restarts_only_changed_gpus() {
    let node = Node::new(3, 30000);
    let slow = "  probeInterval: 1s\n";
    node.write_config("      - {name: a, replicas: 2, devices: [0]}\n      - {name: b, replicas: 2, devices: [1]}\n", slow);
    let d = node.start();
    let p0 = pid_of(&node.wait_ready(0));
    let p1 = pid_of(&node.wait_ready(1));

    // A bad config is refused and nothing changes.
    node.write_config("      - {name: a, replicas: 0, devices: [0]}\n", slow);
    d.signal(libc::SIGHUP);
    let s = wait_for("reload error", || {
        node.status().filter(|s| !s["lastReloadError"].is_null())
    });
    assert!(
        s["lastReloadError"]
            .as_str()
            .unwrap()
            .contains("sharing.mps.resources[0].replicas"),
        "{s}"
    );

    // GPU 0 unchanged, GPU 1 to 4 replicas, GPU 2 added.
    node.write_config("      - {name: a, replicas: 2, devices: [0]}\n      - {name: b, replicas: 4, devices: [1, 2]}\n", slow);
    d.signal(libc::SIGHUP);
    let g1 = wait_for("GPU 1 restarted", || {
        node.gpu_status(1).filter(|g| {
            g["state"] == "ready"
                && g["pid"].as_i64() != Some(p1)
                && g["activeThreadPercentage"] == 25
        })
    });
    node.wait_ready(2);
    assert!(node.status().unwrap()["lastReloadError"].is_null());
    assert!(node
        .client_limits(1)
        .contains("active_thread_percentage=25.0 pinned_mem_limit=0=7500M"));
    assert!(!alive(p1), "old daemon of GPU 1 must be gone");
    let g0 = node.gpu_status(0).unwrap();
    assert_eq!(pid_of(&g0), p0, "unchanged GPU 0 must keep its daemon");
    assert_eq!(g0["restarts"], 0);
    assert_eq!(g1["restarts"], 0, "a reload is not a crash restart");

    // Remove GPU 0: its daemon quits and its directory goes.
    node.write_config("      - {name: b, replicas: 4, devices: [1, 2]}\n", slow);
    d.signal(libc::SIGHUP);
    wait_for("GPU 0 removed", || {
        node.gpu_status(0).is_none().then_some(())
    });
    wait_for("GPU 0 dir removed", || {
        (!node.mps_root.join(uuid(0)).exists()).then_some(())
    });
    assert!(!alive(p0));
    assert_eq!(node.gpu_status(2).unwrap()["state"], "ready");
}

#[test]
fn a_restarted_instance_replaces_the_daemons_of_a_killed_one() {
    let node = Node::new(1, 8192);
    node.write_config("      - {name: r, replicas: 2, devices: all}\n", FAST);
    let mut first = node.start();
    let old = pid_of(&node.wait_ready(0));
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    assert!(alive(old), "the control daemon outlives its supervisor");
    let second = node.start();
    let g = wait_for("new daemon", || {
        node.gpu_status(0)
            .filter(|g| g["state"] == "ready" && g["pid"].as_i64() != Some(old))
    });
    assert!(
        !alive(old),
        "the stale control daemon {old} must be replaced"
    );
    let ready: Value = serde_json::from_slice(&std::fs::read(node.ready_file(0)).unwrap()).unwrap();
    assert_eq!(ready["supervisorPid"], second.pid());
    assert_eq!(ready["pid"], g["pid"]);
}

#[test]
fn a_second_instance_on_the_same_root_is_refused() {
    let node = Node::new(1, 8192);
    node.write_config("      - {name: r, replicas: 2, devices: all}\n", FAST);
    let d = node.start();
    node.wait_ready(0);
    let out = node.command().output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("another gpu-mps-daemon (pid {})", d.pid())),
        "{err}"
    );
    assert!(err.contains(&node.mps_root.display().to_string()), "{err}");
    // The first one is unaffected.
    assert_eq!(node.gpu_status(0).unwrap()["state"], "ready");
    assert!(node.mps_root.join(".lock").exists());
}

#[test]
fn config_errors_name_the_key_and_start_nothing() {
    let node = Node::new(2, 8192);
    let cases = [
        ("      - {name: r, replicas: 0}\n", "", "sharing.mps.resources[0].replicas"),
        ("      - {name: r, replicas: 2, devices: [GPU-UUID]}\n", "", "sharing.mps.resources[0].devices: unsupported type for device"),
        ("      - {name: r, replicas: 2, devices: [7]}\n", "", "sharing.mps.resources[0].devices[0]: unknown device \"7\""),
        ("      - {name: r, replicas: 2, devices: [0]}\n      - {name: r, replicas: 2, devices: [1]}\n", "", "sharing.mps.resources[1].name: duplicate"),
        ("      - {name: r, replicas: 2, devices: [0]}\n      - {name: s, replicas: 2, devices: [0]}\n", "", "already shared by resource \"r\""),
        ("      - {name: r, replicas: 2}\n", "  probeInterval: soon\n", "mpsDaemon.probeInterval"),
        ("      - {name: r, replicas: 2}\n", "  colour: blue\n", "unknown field `colour`"),
    ];
    for (res, extra, want) in cases {
        node.write_config(res, extra);
        let out = node.command().output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains(want), "want {want:?} in:\n{err}");
        assert!(
            err.contains(&node.config.display().to_string()),
            "names the file: {err}"
        );
        assert!(
            !node.mps_root.exists(),
            "nothing may be created for a bad config"
        );
    }
}
