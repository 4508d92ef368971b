//! gpu-mps-daemon's client enforcement against the simulator, with real cgroups:
//! sim clients run in v1 `pids` cgroups named like containerd containers
//! (`/sys/fs/cgroup/pids/gpuhook-test-*/cri-containerd-<64hex>.scope`), get their share's limits
//! from the written spec's env, show up per container in status, the status table and /metrics,
//! are capped (newest terminated), and are ended when their container is gone.
//!
//! The cgroup tests need root and a v1 `pids` hierarchy; they skip with a message otherwise,
//! unless GPUHOOK_REQUIRE_E2E=1 makes that a failure.
// Test support: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

mod enforcement_support;

use std::path::Path;
use std::process::{Child, Command, Stdio};

use common::*;
use enforcement_support::*;
use gpu_mps_daemon::metrics_parse::parse_text;

#[test]
fn clients_are_attributed_capped_and_ended_with_their_container() {
    if !cgroups_ready("clients_are_attributed_capped_and_ended_with_their_container") {
        return;
    }
    let node = Node::new(1, 46068);
    node.write_config(
        "      - {name: nvidia.com/gpu, replicas: 4, devices: all}\n",
        &format!("{FAST}{SHARES}  maxClientsPerContainer: 2\n"),
    );
    let d = node.start();
    node.wait_ready(0);
    wait_for("spec", || node.cdi_spec().exists().then_some(()));
    let (a, b) = (ctr_id(0xa1), ctr_id(0xb2));
    let cg_a = TestCgroup::new(&format!("cri-containerd-{a}.scope"));
    let cg_b = TestCgroup::new(&format!("cri-containerd-{b}.scope"));
    let env = host_env(&node, "0-quarter", 0);
    let (mut c1, mut c2) = capped_in_container(&node, &d, &cg_a, &a, &env);
    attributed_in_status_and_metrics(&node, &d, &a);
    ended_with_container(&node, &d, &cg_b, &b, &env);
    assert!(c1.try_wait().unwrap().is_none(), "container a is untouched");
    drop(cg_a);
    let _ = (c1.wait(), c2.wait());
}

/// Two clients of container `a` run (with the quarter share's limits); a third is over the
/// cap of 2 and, the newest, is terminated.
fn capped_in_container(
    node: &Node,
    d: &Daemon,
    cg_a: &TestCgroup,
    a: &str,
    env: &[(String, String)],
) -> (Child, Child) {
    let sim = sim_bin();
    let client = ["--sim-client", "--uid", "0"];
    let mut c1 = cg_a.spawn(&sim, &client, env);
    wait_client(node, c1.id(), a);
    // Its limits are the quarter share's, not the server's (half).
    let limits = node.control(0, &format!("sim_get_client_limits {}", c1.id()));
    assert_eq!(
        String::from_utf8_lossy(&limits.stdout).trim(),
        "active_thread_percentage=25.0 pinned_mem_limit=0=11517M"
    );
    let mut c2 = cg_a.spawn(&sim, &client, env);
    wait_client(node, c2.id(), a);
    // A third client of container a is over the cap of 2: the newest (it) is terminated.
    let mut c3 = cg_a.spawn(&sim, &client, env);
    assert_eq!(
        wait_exit_code(&mut c3),
        Some(2),
        "terminated by the daemon; log:\n{}",
        d.log_text()
    );
    let u = wait_for("over_cap counted", || {
        Some(usage(node, 0)).filter(|u| u["terminations"]["over_cap"] == 1)
    });
    assert_eq!(u["clients"].as_array().unwrap().len(), 2, "{u}");
    assert!(
        c1.try_wait().unwrap().is_none() && c2.try_wait().unwrap().is_none(),
        "older clients keep running"
    );
    let log = d.log_text();
    assert!(
        log.lines().any(|l| l.contains("terminated MPS client")
            && l.contains(a)
            && l.contains("over_cap")),
        "{log}"
    );
    (c1, c2)
}

/// The status table and /metrics attribute the clients to container `a`.
fn attributed_in_status_and_metrics(node: &Node, d: &Daemon, a: &str) {
    let out = Command::new(daemon_bin())
        .args(["status", "--mps-root"])
        .arg(&node.mps_root)
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains(&format!("container {a} (containerd): 2 client(s)")),
        "{table}"
    );
    let (code, body) = d.get("/metrics");
    assert_eq!(code, 200);
    let samples = parse_text(&body).unwrap_or_else(|e| panic!("{e}\n{body}"));
    let value = |name: &str, label: (&str, &str)| {
        samples
            .iter()
            .find(|s| s.name == name && s.labels.get(label.0).map(String::as_str) == Some(label.1))
            .map(|s| s.value)
    };
    assert_eq!(
        value("gpuhook_mps_clients_per_container", ("container", a)),
        Some(2.0),
        "{body}"
    );
    assert_eq!(
        value(
            "gpuhook_mps_client_terminations_total",
            ("reason", "over_cap")
        ),
        Some(1.0),
        "{body}"
    );
    assert_eq!(
        value("gpuhook_mps_servers", ("gpu", "0")),
        Some(1.0),
        "{body}"
    );
    assert!(
        value(
            "gpuhook_mps_command_duration_seconds_count",
            ("command", "get_client_list")
        )
        .unwrap()
            >= 1.0,
        "{body}"
    );
}

/// Container `b`'s "process" is a sleep in its cgroup; the MPS client registered as that pid
/// lives on the host. Deleting container `b` must end the client through terminate_client.
fn ended_with_container(
    node: &Node,
    d: &Daemon,
    cg_b: &TestCgroup,
    b: &str,
    env: &[(String, String)],
) {
    let sim = sim_bin();
    let mut sleeper = cg_b.spawn(Path::new("/bin/sleep"), &["1000"], &[]);
    let sp = sleeper.id();
    wait_for("sleeper in container b", || {
        std::fs::read_to_string(format!("/proc/{sp}/cgroup"))
            .ok()
            .filter(|c| c.contains(b))
    });
    let mut cb = Command::new(&sim)
        .env_clear()
        .envs(env.iter().cloned())
        .args(["--sim-client", "--uid", "0", "--pid", &sp.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    wait_client(node, sp, b);
    cg_b.remove();
    let _ = sleeper.wait();
    assert_eq!(wait_exit_code(&mut cb), Some(2), "log:\n{}", d.log_text());
    wait_for("container_gone counted", || {
        (usage(node, 0)["terminations"]["container_gone"] == 1).then_some(())
    });
    assert!(!clients_of(node, 0).contains_key(&u64::from(sp)));
}

/// A fake proc tree and cgroup root: clients registered under made-up pids whose
/// `<procRoot>/<pid>/cgroup` name CRI-O and podman containers (no root needed).
#[test]
fn fake_proc_root_attributes_and_ends_clients_of_every_reason() {
    let node = Node::new(1, 16384);
    let (proc_root, cg_root) = (node.dir.path().join("proc"), node.dir.path().join("cgroup"));
    node.write_config(
        "      - {name: nvidia.com/gpu, replicas: 2, devices: all}\n",
        &format!(
            "{FAST}  maxClientsPerContainer: 1\n  procRoot: {}\n  cgroupRoot: {}\n",
            proc_root.display(),
            cg_root.display()
        ),
    );
    let d = node.start();
    node.wait_ready(0);
    wait_for("spec", || node.cdi_spec().exists().then_some(()));
    let (crio, podman) = (ctr_id(0xc1), ctr_id(0xd2));
    let crio_path = fake_procs(&proc_root, &cg_root, &crio, &podman);
    let env = host_env(&node, "0", 0);
    let spawn = |pid: u32| {
        Command::new(sim_bin())
            .env_clear()
            .envs(env.iter().cloned())
            .args(["--sim-client", "--uid", "0", "--pid", &pid.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut a = spawn(3_999_001);
    wait_client(&node, 3_999_001, &crio);
    let mut b = spawn(3_999_002);
    wait_client(&node, 3_999_002, &podman);
    let runtimes: Vec<String> = usage(&node, 0)["clients"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["runtime"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(runtimes, ["cri-o", "podman"]);
    // over_cap: a second client of the podman container (cap 1) is the newest: ended.
    let mut c = spawn(3_999_003);
    assert_eq!(wait_exit_code(&mut c), Some(2), "log:\n{}", d.log_text());
    // container_gone: the CRI-O container's cgroup directory disappears.
    std::fs::remove_dir(cg_root.join(crio_path.trim_start_matches('/'))).unwrap();
    assert_eq!(wait_exit_code(&mut a), Some(2), "log:\n{}", d.log_text());
    // process_gone: the podman client's pid disappears while its container stays.
    std::fs::remove_dir_all(proc_root.join("3999002")).unwrap();
    assert_eq!(wait_exit_code(&mut b), Some(2), "log:\n{}", d.log_text());
    let u = wait_for("all three counted", || {
        Some(usage(&node, 0)).filter(|u| {
            u["terminations"]["process_gone"] == 1
                && u["clients"].as_array().is_some_and(Vec::is_empty)
        })
    });
    assert_eq!(u["terminations"]["over_cap"], 1, "{u}");
    assert_eq!(u["terminations"]["container_gone"], 1, "{u}");
    let log = d.log_text();
    for (id, reason) in [
        (&podman, "over_cap"),
        (&crio, "container_gone"),
        (&podman, "process_gone"),
    ] {
        assert!(
            log.lines().any(|l| l.contains("terminated MPS client")
                && l.contains(id.as_str())
                && l.contains(reason)),
            "{reason} for {id} logged:\n{log}"
        );
    }
}

/// `<procRoot>/<pid>/cgroup` of three made-up pids: 3999001 in CRI-O container `crio` (cgroup
/// v2 line), 3999002 and 3999003 in podman container `podman` (v1 `pids` line), and their
/// cgroup directories. Returns the CRI-O container's cgroup path.
fn fake_procs(proc_root: &Path, cg_root: &Path, crio: &str, podman: &str) -> String {
    let crio_path = format!("/kubepods.slice/kubepods-pod1.slice/crio-{crio}.scope");
    let podman_path = format!("/machine.slice/libpod-{podman}.scope");
    let fake = |pid: u32, line: &str, cgroup: &str| {
        std::fs::create_dir_all(proc_root.join(pid.to_string())).unwrap();
        std::fs::write(proc_root.join(pid.to_string()).join("cgroup"), line).unwrap();
        std::fs::create_dir_all(cg_root.join(cgroup.trim_start_matches('/'))).unwrap();
    };
    fake(3_999_001, &format!("0::{crio_path}\n"), &crio_path);
    for pid in [3_999_002, 3_999_003] {
        fake(
            pid,
            &format!("3:pids:{podman_path}\n0::/\n"),
            &format!("pids{podman_path}"),
        );
    }
    crio_path
}
