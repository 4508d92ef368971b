//! gpu-mps-daemon's CDI spec and client enforcement against the simulator, with real cgroups:
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

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use common::*;
use gpu_mps_daemon::gpuhook_cdi::{apply_devices, Registry, Spec};
use gpu_mps_daemon::metrics_parse::parse_text;
use serde_json::Value;

const FAST: &str = "  probeInterval: 200ms\n  commandTimeout: 5s\n  maxRestartBackoff: 1s\n";
const SHARES: &str = "  shares: [{name: quarter, fraction: 1/4}, {name: half, fraction: 1/2}]\n";

/// A v1 `pids` cgroup; its processes are killed and the directory removed on drop.
struct TestCgroup {
    dir: PathBuf,
}

impl TestCgroup {
    fn parent() -> Option<PathBuf> {
        let p = Path::new("/sys/fs/cgroup/pids");
        (nix::unistd::geteuid().is_root() && p.join("cgroup.procs").exists())
            .then(|| p.join(format!("gpuhook-test-{}", std::process::id())))
    }

    fn new(name: &str) -> TestCgroup {
        let dir = Self::parent().unwrap().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        TestCgroup { dir }
    }

    /// Runs `cmd` inside this cgroup (moved there by a shell before it execs).
    fn spawn(&self, program: &Path, args: &[&str], env: &[(String, String)]) -> Child {
        let mut script = format!(
            "echo $$ > '{}/cgroup.procs' && exec '{}'",
            self.dir.display(),
            program.display()
        );
        for a in args {
            script.push_str(&format!(" '{a}'"));
        }
        Command::new("/bin/sh")
            .args(["-c", &script])
            .env_clear()
            .envs(env.iter().cloned())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    }

    fn remove(&self) {
        for _ in 0..200 {
            let procs = std::fs::read_to_string(self.dir.join("cgroup.procs")).unwrap_or_default();
            for p in procs.split_whitespace() {
                // SAFETY: kill(2) of a process of our own test cgroup.
                unsafe { libc::kill(p.parse().unwrap_or(0), libc::SIGKILL) };
            }
            if std::fs::remove_dir(&self.dir).is_ok() || !self.dir.exists() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("cannot remove {}", self.dir.display());
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        if self.dir.exists() {
            self.remove();
        }
        if let Some(parent) = self.dir.parent() {
            let _ = std::fs::remove_dir(parent);
        }
    }
}

fn cgroups_ready(test: &str) -> bool {
    if TestCgroup::parent().is_some() {
        return true;
    }
    let msg = format!("{test} needs root and the cgroup v1 pids hierarchy");
    assert!(
        std::env::var("GPUHOOK_REQUIRE_E2E").as_deref() != Ok("1"),
        "{msg}"
    );
    eprintln!("SKIP: {msg}");
    false
}

fn ctr_id(n: u8) -> String {
    format!("{:02x}", n).repeat(32)
}

/// The env a container of CDI device `name` gets, applied from the daemon's spec file the way a
/// runtime applies it.
fn device_env(node: &Node, name: &str) -> Vec<(String, String)> {
    let reg = Registry::load(&[&node.cdi_dir]);
    assert!(reg.errors.is_empty(), "{:?}", reg.errors);
    let mut oci = serde_json::json!({"process": {"env": []}});
    apply_devices(&mut oci, &reg, &[format!("nvidia.com/gpu-mps={name}")]).unwrap();
    oci["process"]["env"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| {
            v.as_str()?
                .split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
        })
        .collect()
}

/// The env with the pipe directory mapped back to the host (these clients run on the host).
fn host_env(node: &Node, name: &str, gpu: u32) -> Vec<(String, String)> {
    let mut env = device_env(node, name);
    for (k, v) in &mut env {
        if k == "CUDA_MPS_PIPE_DIRECTORY" {
            *v = node.pipe(gpu).display().to_string();
        }
    }
    env
}

fn usage(node: &Node, gpu: u32) -> Value {
    node.gpu_status(gpu)
        .map(|g| g["usage"].clone())
        .unwrap_or(Value::Null)
}

fn clients_of(node: &Node, gpu: u32) -> BTreeMap<u64, String> {
    usage(node, gpu)["clients"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|c| {
                    (
                        c["pid"].as_u64().unwrap(),
                        c["container"].as_str().unwrap_or("-").to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn wait_client(node: &Node, pid: u32, ctr: &str) {
    wait_for(&format!("client {pid} attributed to {ctr}"), || {
        (clients_of(node, 0).get(&u64::from(pid)).map(String::as_str) == Some(ctr)).then_some(())
    });
}

fn wait_exit_code(child: &mut Child) -> Option<i32> {
    wait_for("client exit", || {
        child.try_wait().unwrap().map(|s| s.code())
    })
}

#[test]
fn spec_lists_ready_gpus_and_is_removed_at_sigterm() {
    let node = Node::new(2, 46068);
    node.write_config(
        "      - {name: nvidia.com/gpu, replicas: 4, devices: all}\n",
        &format!("{FAST}{SHARES}"),
    );
    let mut d = node.start();
    node.wait_ready(0);
    node.wait_ready(1);
    let spec = wait_for("spec with both GPUs", || {
        let s = Spec::from_slice(&std::fs::read(node.cdi_spec()).ok()?, None).ok()?;
        (s.devices.len() == 12).then_some(s)
    });
    assert_eq!(
        (spec.kind.as_str(), spec.cdi_version.as_str()),
        ("nvidia.com/gpu-mps", "0.5.0")
    );
    let env: BTreeMap<String, String> = device_env(&node, "0-half").into_iter().collect();
    assert_eq!(env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], "50");
    assert_eq!(env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], "0=23034M");
    assert_eq!(env["CUDA_MPS_PIPE_DIRECTORY"], "/tmp/nvidia-mps");
    let env: BTreeMap<String, String> = device_env(&node, &uuid(1)).into_iter().collect();
    assert_eq!(env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], "25");
    // The server allows the largest share; a half-share client gets half, a default one a quarter.
    let half = Command::new(sim_bin())
        .env_clear()
        .envs(host_env(&node, "0-half", 0))
        .args(["--sim-client", "--uid", "0", "--hold", "0"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&half.stdout);
    assert!(
        text.contains("active_thread_percentage=50.0 pinned_mem_limit=0=23034M"),
        "{text}"
    );
    // status.json follows the in-memory state shortly after.
    wait_for("status lists 12 CDI devices", || {
        node.status()
            .filter(|s| s["cdi"]["devices"].as_array().map(Vec::len) == Some(12))
    });
    // A reload that drops the half share rewrites the spec without it.
    node.write_config(
        "      - {name: nvidia.com/gpu, replicas: 4, devices: all}\n",
        &format!("{FAST}  shares: [{{name: quarter, fraction: 1/4}}]\n"),
    );
    d.signal(libc::SIGHUP);
    let spec = wait_for("spec without the half share", || {
        let s = Spec::from_slice(&std::fs::read(node.cdi_spec()).ok()?, None).ok()?;
        (s.devices.len() == 8).then_some(s)
    });
    assert!(spec.devices.iter().all(|d| !d.name.ends_with("-half")));
    let env: BTreeMap<String, String> = device_env(&node, "1-quarter").into_iter().collect();
    assert_eq!(env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], "25");
    d.signal(libc::SIGTERM);
    assert_eq!(d.wait_exit(), Some(0), "{}", d.log_text());
    assert!(!node.cdi_spec().exists(), "spec removed at shutdown");
}

#[test]
fn bad_shares_and_claims_fail_before_any_spec_is_written() {
    let node = Node::new(2, 46068);
    let cases = [
        ("      - {name: r, replicas: 2, devices: all}\n", "  shares: [{name: big, fraction: 5/4}]\n", "mpsDaemon.shares[0].fraction: 5/4 is more than a whole GPU"),
        ("      - {name: r, replicas: 2, devices: all}\n", "  shares: [{name: a, fraction: 3/4}, {name: b, fraction: 1/2}]\n", "add up to more than one GPU"),
        ("      - {name: a, replicas: 2, devices: [0]}\n      - {name: b, replicas: 2, devices: [0]}\n", "", "is already shared by resource \"a\""),
        ("      - {name: r, replicas: 2, devices: all}\n", "  shares: [{name: \"x/y\", fraction: 1/4}]\n", "cannot be part of a CDI device name"),
    ];
    for (res, extra, want) in cases {
        node.write_config(res, extra);
        let out = node.command().output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains(want), "want {want:?} in {err}");
        assert!(!node.cdi_dir.exists(), "nothing written for {want}");
        assert!(!node.mps_root.exists());
    }
    // A reload with a bad share keeps the running spec byte for byte.
    node.write_config(
        "      - {name: r, replicas: 2, devices: all}\n",
        &format!("{FAST}{SHARES}"),
    );
    let d = node.start();
    let before = wait_for("spec", || {
        let b = std::fs::read(node.cdi_spec()).ok()?;
        (Spec::from_slice(&b, None).ok()?.devices.len() == 12).then_some(b)
    });
    node.write_config(
        "      - {name: r, replicas: 2, devices: all}\n",
        &format!("{FAST}  shares: [{{name: huge, fraction: 2}}]\n"),
    );
    d.signal(libc::SIGHUP);
    let s = wait_for("reload refused", || {
        node.status().filter(|s| !s["lastReloadError"].is_null())
    });
    assert!(
        s["lastReloadError"]
            .as_str()
            .unwrap()
            .contains("mpsDaemon.shares[0].fraction"),
        "{s}"
    );
    assert_eq!(std::fs::read(node.cdi_spec()).unwrap(), before);
    // Asking for a share that does not exist is the consumer's error; nothing is applied.
    let reg = Registry::load(&[&node.cdi_dir]);
    let mut oci = serde_json::json!({"process": {"env": ["A=1"]}});
    let err = apply_devices(
        &mut oci,
        &reg,
        &[
            "nvidia.com/gpu-mps=0-eighth".into(),
            "nvidia.com/gpu-mps=0-half".into(),
        ],
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "unresolvable CDI devices nvidia.com/gpu-mps=0-eighth"
    );
    assert_eq!(oci, serde_json::json!({"process": {"env": ["A=1"]}}));
}

#[test]
fn a_foreign_file_at_the_spec_path_is_left_alone() {
    let node = Node::new(1, 8192);
    std::fs::create_dir_all(&node.cdi_dir).unwrap();
    let foreign = r#"{"cdiVersion":"0.3.0","kind":"acme.com/gpu-mps","devices":[{"name":"a","containerEdits":{"env":["A=1"]}}]}"#;
    std::fs::write(node.cdi_spec(), foreign).unwrap();
    node.write_config("      - {name: r, replicas: 2, devices: all}\n", FAST);
    let mut d = node.start();
    node.wait_ready(0);
    let s = wait_for("cdi error", || {
        node.status().filter(|s| !s["cdi"]["lastError"].is_null())
    });
    assert!(
        s["cdi"]["lastError"]
            .as_str()
            .unwrap()
            .contains("refusing to overwrite"),
        "{s}"
    );
    d.signal(libc::SIGTERM);
    assert_eq!(d.wait_exit(), Some(0));
    assert_eq!(std::fs::read_to_string(node.cdi_spec()).unwrap(), foreign);
}

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
    let sim = sim_bin();
    let client = ["--sim-client", "--uid", "0"];
    let mut c1 = cg_a.spawn(&sim, &client, &env);
    wait_client(&node, c1.id(), &a);
    // Its limits are the quarter share's, not the server's (half).
    let limits = node.control(0, &format!("sim_get_client_limits {}", c1.id()));
    assert_eq!(
        String::from_utf8_lossy(&limits.stdout).trim(),
        "active_thread_percentage=25.0 pinned_mem_limit=0=11517M"
    );
    let mut c2 = cg_a.spawn(&sim, &client, &env);
    wait_client(&node, c2.id(), &a);
    // A third client of container a is over the cap of 2: the newest (it) is terminated.
    let mut c3 = cg_a.spawn(&sim, &client, &env);
    assert_eq!(
        wait_exit_code(&mut c3),
        Some(2),
        "terminated by the daemon; log:\n{}",
        d.log_text()
    );
    let u = wait_for("over_cap counted", || {
        Some(usage(&node, 0)).filter(|u| u["terminations"]["over_cap"] == 1)
    });
    assert_eq!(u["clients"].as_array().unwrap().len(), 2, "{u}");
    assert!(
        c1.try_wait().unwrap().is_none() && c2.try_wait().unwrap().is_none(),
        "older clients keep running"
    );
    let log = d.log_text();
    assert!(
        log.lines().any(|l| l.contains("terminated MPS client")
            && l.contains(&a)
            && l.contains("over_cap")),
        "{log}"
    );

    // Status table and /metrics attribute the clients to container a.
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
        value("gpuhook_mps_clients_per_container", ("container", &a)),
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

    // Container b's "process" is a sleep in its cgroup; the MPS client registered as that pid
    // lives on the host. Deleting container b must end the client through terminate_client.
    let mut sleeper = cg_b.spawn(Path::new("/bin/sleep"), &["1000"], &[]);
    let sp = sleeper.id();
    wait_for("sleeper in container b", || {
        std::fs::read_to_string(format!("/proc/{sp}/cgroup"))
            .ok()
            .filter(|c| c.contains(&b))
    });
    let mut cb = Command::new(&sim)
        .env_clear()
        .envs(env.iter().cloned())
        .args(["--sim-client", "--uid", "0", "--pid", &sp.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    wait_client(&node, sp, &b);
    cg_b.remove();
    let _ = sleeper.wait();
    assert_eq!(wait_exit_code(&mut cb), Some(2), "log:\n{}", d.log_text());
    wait_for("container_gone counted", || {
        (usage(&node, 0)["terminations"]["container_gone"] == 1).then_some(())
    });
    assert!(!clients_of(&node, 0).contains_key(&u64::from(sp)));
    assert!(c1.try_wait().unwrap().is_none(), "container a is untouched");
    drop(cg_a);
    let _ = (c1.wait(), c2.wait());
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
    let crio_path = format!("/kubepods.slice/kubepods-pod1.slice/crio-{crio}.scope");
    let podman_path = format!("/machine.slice/libpod-{podman}.scope");
    let fake = |pid: u32, line: &str, cgroup: &str| {
        std::fs::create_dir_all(proc_root.join(pid.to_string())).unwrap();
        std::fs::write(proc_root.join(pid.to_string()).join("cgroup"), line).unwrap();
        std::fs::create_dir_all(cg_root.join(cgroup.trim_start_matches('/'))).unwrap();
    };
    fake(3_999_001, &format!("0::{crio_path}\n"), &crio_path);
    fake(
        3_999_002,
        &format!("3:pids:{podman_path}\n0::/\n"),
        &format!("pids{podman_path}"),
    );
    fake(
        3_999_003,
        &format!("3:pids:{podman_path}\n0::/\n"),
        &format!("pids{podman_path}"),
    );
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
