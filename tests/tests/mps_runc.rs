//! gpu-mps-daemon end to end with real runc on a simulated L20 node.
//!
//! The daemon discovers the node (mock NVML), starts one simulated control daemon per GPU and
//! writes its `nvidia.com/gpu-mps` CDI spec. A busybox container gets the device
//! `nvidia.com/gpu-mps=0-half` through `gpuhook-runtime` (a `cdi.k8s.io/*` annotation, as a
//! device plugin sets it; while that binary is still a placeholder, the device is applied to
//! config.json with gpuhook_cdi's Registry + apply_devices, the code it uses), is run by runc, and we check inside it: the pipe directory is mounted (the control socket is
//! there), `/dev/shm` is the daemon's shared tmpfs (a file written inside appears on the host),
//! and the env has `CUDA_MPS_PIPE_DIRECTORY` and the half share's limits. An MPS client started
//! in the container (`runc exec` of the node's control binary, which the spec mounts, with the
//! host's glibc bind-mounted read-only) gets the share's limits and shows up in
//! `gpu-mps-daemon status` attributed to the container's cgroup; when the container is deleted,
//! a client still registered for it is ended by the daemon (`terminate_client`).
//!
//! The container shares the host pid namespace: the simulator registers a client under the pid
//! the client reports for itself, whereas the real MPS daemon sees host pids.

// Integration tests: a failed unwrap or expect is the test failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use gpu_mps_daemon::gpuhook_cdi::{apply_devices, Registry};
use gpuhook_e2e::mps::{status_json, wait_for, write_config, Daemon};
use gpuhook_e2e::{built, busybox_rootfs, e2e_ready, run_ok};
use serde_json::{json, Value};

/// `runc delete -f` and removal of the container's cgroup parent on drop.
struct Container {
    id: String,
    cgroup_parent: String,
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = Command::new("runc")
            .args(["delete", "-f", &self.id])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if let Ok(entries) = std::fs::read_dir("/sys/fs/cgroup") {
            for e in entries.flatten() {
                let _ =
                    std::fs::remove_dir(e.path().join(self.cgroup_parent.trim_start_matches('/')));
            }
        }
    }
}

/// `gpuhook-runtime` when it is more than the placeholder that says "not built yet".
fn wired_runtime() -> Option<PathBuf> {
    let bin = built("gpuhook-runtime");
    let out = Command::new(&bin)
        .env("GPUHOOK_CONFIG", "/nonexistent/gpuhook-mps-e2e.toml")
        .arg("--version")
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stderr);
    if text.contains("not built yet") {
        eprintln!("gpuhook-runtime is not wired yet: applying the CDI device with gpuhook_cdi");
        return None;
    }
    Some(bin)
}

/// GPU 0's entry in the daemon's `status.json`, once there is one.
fn gpu0_entry(mps: &Path) -> Option<Value> {
    status_json(mps)?["gpus"]
        .as_array()?
        .iter()
        .find(|g| g["index"] == 0)
        .cloned()
}

/// The client of GPU 0 with `pid`, registered for `container`, once the daemon reports it.
fn gpu0_client(mps: &Path, pid: impl Into<Value>, container: &str) -> Option<Value> {
    let pid = pid.into();
    gpu0_entry(mps)?["usage"]["clients"]
        .as_array()?
        .iter()
        .find(|c| c["pid"] == pid && c["container"] == container)
        .cloned()
}

/// Runs `cmd` with no stdio but stderr to `err` (a detached container inherits runc's stdio, so
/// no pipes: they would never close); fails with `what` and that stderr when it fails.
fn run_detached(cmd: &mut Command, err: &Path, what: &str) {
    let st = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(err).unwrap())
        .status()
        .unwrap();
    assert!(
        st.success(),
        "{what}: {}",
        std::fs::read_to_string(err).unwrap_or_default()
    );
}

fn runc_exec(id: &str, script: &str) -> String {
    run_ok(Command::new("runc").args(["exec", id, "sh", "-c", script]))
}

/// The MPS daemon serving a "half" share of the simulated L20's GPU 0, and what the steps read.
struct Share {
    node: PathBuf,
    mps: PathBuf,
    cdi: PathBuf,
    spec_file: PathBuf,
    uuid: String,
    half_mem: u64,
}

/// Builds the L20 node and starts the daemon with one share, `half`; waits for its CDI device.
fn start_share(tmp: &Path) -> (Share, Daemon) {
    let node = tmp.join("node");
    run_ok(
        Command::new(built("gpuhook-sim"))
            .args(["build", "l20"])
            .arg(&node),
    );
    let (mps, cdi) = (tmp.join("mps"), tmp.join("cdi"));
    let config = tmp.join("mps.yaml");
    write_config(
        &config,
        &mps,
        &node,
        &cdi,
        "  shares: [{name: half, fraction: 1/2}]\n",
    );
    let daemon = Daemon::start(&config, None, &tmp.join("daemon.log"));
    let spec_file = cdi.join("nvidia.com-gpu-mps.json");
    let gpu0 = daemon.wait_ready(&mps, &spec_file, 0, |s| {
        s["cdi"]["devices"]
            .as_array()
            .is_some_and(|d| d.iter().any(|d| d == "nvidia.com/gpu-mps=0-half"))
    });
    let share = Share {
        uuid: gpu0["uuid"].as_str().unwrap().to_string(),
        half_mem: gpu0["pinnedMemoryLimitMiB"].as_u64().unwrap(),
        node,
        mps,
        cdi,
        spec_file,
    };
    (share, daemon)
}

/// The bundle: busybox, host pid namespace, a plain cgroupsPath, host glibc read-only, and the
/// share requested the device plugin's way (a CDI annotation gpuhook-runtime resolves) or, without
/// a wired runtime, applied to config.json directly. Returns the runtime to run it with and its
/// gpuhook config.
fn write_bundle(
    tmp: &Path,
    bundle: &Path,
    share: &Share,
    container: &Container,
) -> (Option<PathBuf>, PathBuf) {
    let (id, cgroup_parent, cdi) = (&container.id, &container.cgroup_parent, &share.cdi);
    busybox_rootfs(&bundle.join("rootfs"), false);
    run_ok(Command::new("runc").arg("spec").current_dir(bundle));
    let mut oci: Value =
        serde_json::from_slice(&std::fs::read(bundle.join("config.json")).unwrap()).unwrap();
    let cgroups_path = format!("{cgroup_parent}/{id}");
    oci["process"]["terminal"] = json!(false);
    oci["process"]["args"] = json!(["sleep", "1000"]);
    oci["root"] = json!({"path": "rootfs", "readonly": false});
    oci["linux"]["cgroupsPath"] = json!(cgroups_path);
    let ns = oci["linux"]["namespaces"].as_array_mut().unwrap();
    ns.retain(|n| n["type"] != "pid");
    for lib in ["/lib/x86_64-linux-gnu", "/lib64"] {
        oci["mounts"].as_array_mut().unwrap().push(json!({
            "destination": lib, "type": "bind", "source": lib, "options": ["rbind", "ro"]
        }));
    }
    let device = "nvidia.com/gpu-mps=0-half".to_string();
    let runtime = wired_runtime();
    let runtime_config = tmp.join("gpuhook.toml");
    if runtime.is_some() {
        // The device plugin's way: a CDI annotation that gpuhook-runtime resolves.
        oci["annotations"] = json!({ "cdi.k8s.io/gpuhook-mps_0-half": device });
        std::fs::write(
            &runtime_config,
            format!(
                "cdi-spec-dirs = [\"{}\"]\n[runtime]\nruntimes = [\"runc\"]\ngenerate-missing = false\n",
                cdi.display()
            ),
        )
        .unwrap();
    } else {
        let reg = Registry::load(&[cdi]);
        assert!(reg.errors.is_empty(), "{:?}", reg.errors);
        apply_devices(&mut oci, &reg, std::slice::from_ref(&device)).unwrap();
    }
    std::fs::write(
        bundle.join("config.json"),
        serde_json::to_vec_pretty(&oci).unwrap(),
    )
    .unwrap();
    (runtime, runtime_config)
}

#[test]
fn runc_container_gets_the_mps_share_and_its_clients_are_watched() {
    if !e2e_ready("mps_runc", &["runc"]) {
        return;
    }
    let tmp = tempfile::Builder::new()
        .prefix("gpuhook-mps-e2e-")
        .tempdir()
        .unwrap();
    let (share, daemon) = start_share(tmp.path());
    let id = format!("gpuhook-mps-{}", std::process::id());
    let container = Container {
        id: id.clone(),
        cgroup_parent: format!("/gpuhook-mps-e2e-{}", std::process::id()),
    };
    let bundle = tmp.path().join("bundle");
    let (runtime, runtime_config) = write_bundle(tmp.path(), &bundle, &share, &container);
    let runc_err = tmp.path().join("runc-run.err");
    run_detached(
        Command::new(runtime.clone().unwrap_or_else(|| PathBuf::from("runc")))
            .env("GPUHOOK_CONFIG", &runtime_config)
            .args(["run", "--detach", "--bundle"])
            .arg(&bundle)
            .arg(&id),
        &runc_err,
        "runc run",
    );
    check_inside(&id, &share);
    let want_ctr = check_client(tmp.path(), &id, &share, &daemon, &runc_err);
    check_stale_client_ended(&id, &share, &daemon, &want_ctr);
    drop(container);
    drop(daemon);
    assert!(
        !share.spec_file.exists(),
        "spec removed when the daemon stops"
    );
}

/// Inside: env, pipe directory, shared /dev/shm, the GPU's device node.
fn check_inside(id: &str, share: &Share) {
    let half_mem = share.half_mem;
    let host_shm = share.mps.join(&share.uuid).join("shm");
    let env = runc_exec(id, "env");
    assert!(
        env.lines()
            .any(|l| l == "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps"),
        "{env}"
    );
    assert!(
        env.lines()
            .any(|l| l == "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50"),
        "{env}"
    );
    let mem_env = format!("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0={half_mem}M");
    assert!(env.lines().any(|l| l == mem_env), "{env}");
    let pipe = runc_exec(id, "ls /tmp/nvidia-mps");
    assert!(
        pipe.lines().any(|l| l == "control"),
        "control socket visible: {pipe}"
    );
    let mounts = runc_exec(id, "cat /proc/mounts");
    assert!(
        mounts
            .lines()
            .any(|l| l.split_whitespace().nth(1) == Some("/dev/shm") && l.contains("tmpfs")),
        "{mounts}"
    );
    runc_exec(id, "echo from-container > /dev/shm/gpuhook-e2e");
    assert_eq!(
        std::fs::read_to_string(host_shm.join("gpuhook-e2e")).unwrap(),
        "from-container\n"
    );
    assert!(
        runc_exec(id, "ls /dev").lines().any(|l| l == "nvidia0"),
        "the GPU's device node is injected"
    );
}

/// An MPS client in the container (the node's control binary, mounted by the spec) is attributed
/// to the container's cgroup, listed by `status`, and gets the share's limits. Returns the
/// container's cgroup path.
fn check_client(tmp: &Path, id: &str, share: &Share, daemon: &Daemon, runc_err: &Path) -> String {
    let (mps, node, uuid, half_mem) = (&share.mps, &share.node, &share.uuid, share.half_mem);
    let logtext = || daemon.log_text();
    let pid_file = tmp.join("client.pid");
    run_detached(
        Command::new("runc")
            .args(["exec", "--detach", "--pid-file"])
            .arg(&pid_file)
            .args([
                id,
                "/usr/bin/nvidia-cuda-mps-control",
                "--sim-client",
                "--uid",
                "0",
            ]),
        runc_err,
        "runc exec",
    );
    let client: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let want_ctr = format!("/gpuhook-mps-e2e-{}/{id}", std::process::id());
    let seen = wait_for("client attributed to the container", || {
        gpu0_client(mps, client, &want_ctr)
    });
    assert_eq!(seen["runtime"], "cgroup", "{seen}; log:\n{}", logtext());
    let table = run_ok(
        Command::new(built("gpu-mps-daemon"))
            .args(["status", "--mps-root"])
            .arg(mps),
    );
    assert!(
        table.contains(&format!(
            "container {want_ctr} (cgroup): 1 client(s), pids {client}"
        )),
        "{table}"
    );
    let limits = {
        use std::io::Write;
        let mut c = Command::new(node.join("usr/bin/nvidia-cuda-mps-control"))
            .env_clear()
            .env("CUDA_MPS_PIPE_DIRECTORY", mps.join(uuid).join("pipe"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        writeln!(c.stdin.take().unwrap(), "sim_get_client_limits {client}").unwrap();
        String::from_utf8(c.wait_with_output().unwrap().stdout).unwrap()
    };
    assert_eq!(
        limits.trim(),
        format!("active_thread_percentage=50.0 pinned_mem_limit=0={half_mem}M")
    );
    want_ctr
}

/// A client registered for the container's init process but living elsewhere (a stale entry):
/// once the container is deleted the daemon must end it.
fn check_stale_client_ended(id: &str, share: &Share, daemon: &Daemon, want_ctr: &str) {
    let (mps, node, uuid) = (&share.mps, &share.node, &share.uuid);
    let logtext = || daemon.log_text();
    // once the container is deleted the daemon must end it.
    let state: Value =
        serde_json::from_str(&run_ok(Command::new("runc").args(["state", id]))).unwrap();
    let init = state["pid"].as_u64().unwrap();
    let mut stale = Command::new(node.join("usr/bin/nvidia-cuda-mps-control"))
        .env_clear()
        .env("CUDA_MPS_PIPE_DIRECTORY", mps.join(uuid).join("pipe"))
        .args(["--sim-client", "--uid", "0", "--pid", &init.to_string()])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("stale client attributed", || {
        gpu0_client(mps, init, want_ctr)
    });
    run_ok(Command::new("runc").args(["delete", "-f", id]));
    let code = wait_for("stale client ended", || {
        stale.try_wait().unwrap().map(|s| s.code())
    });
    assert_eq!(
        code,
        Some(2),
        "terminated by the daemon; log:\n{}",
        logtext()
    );
    let g = wait_for("no clients left", || {
        let g = gpu0_entry(mps)?;
        g["usage"]["clients"].as_array()?.is_empty().then_some(g)
    });
    assert_eq!(g["usage"]["terminations"]["container_gone"], 1, "{g}");
    let log = logtext();
    assert!(
        log.lines().any(|l| l.contains("terminated MPS client")
            && l.contains(want_ctr)
            && l.contains("container_gone")),
        "{log}"
    );
}
