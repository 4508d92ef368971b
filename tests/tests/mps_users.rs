//! MPS shares and the users containers run as, end to end: gpu-mps-daemon on a simulated L20
//! node, containers run by real runc through `gpuhook-runtime` with the share
//! `nvidia.com/gpu-mps=0` (a `cdi.k8s.io/*` annotation, as a device plugin sets it).
//!
//! 1. A container running as uid 1000 reaches the daemon: its CUDA client (the node's control
//!    binary in `--sim-client` mode, `runc exec` as the container's user) is served by an MPS
//!    server running as uid 1000. (Before: a root-only socket, "Cannot find MPS control daemon",
//!    and a real CUDA client would have run without MPS, unlimited.)
//! 2. Two users on one GPU block each other (`nvidia-cuda-mps-control(1)`: one user's server at a
//!    time): a client of uid 2000 waits while uid 1000's client runs; measured and printed.
//!    A container of uid 2000 is refused at start, the error naming uid 1000.
//! 3. `mpsDaemon.clientUser: 1000` (reloaded with SIGHUP): a container of another user (root)
//!    is refused at start, naming the setting; uid 1000 still starts.
//! 4. A share whose daemon is not ready (gpu-mps-daemon stopped after writing the container's
//!    spec dir content) refuses the container instead of letting it run without MPS.

// Integration tests: a failed unwrap or expect is the test failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use gpuhook_e2e::mps::{status_json, wait_for, write_config, Daemon};
use gpuhook_e2e::{built, busybox_rootfs, e2e_ready, run_ok};
use serde_json::{json, Value};

/// The node, the daemon's directories and the wrapper's config.
struct Rig {
    tmp: tempfile::TempDir,
    node: PathBuf,
    mps: PathBuf,
    cdi: PathBuf,
    runtime_config: PathBuf,
    rootfs: PathBuf,
}

/// `runc delete -f` of every container made, on drop.
struct Containers(Vec<String>);

impl Drop for Containers {
    fn drop(&mut self) {
        for id in &self.0 {
            let _ = Command::new("runc")
                .args(["delete", "-f", id])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

fn rig() -> Rig {
    let tmp = tempfile::Builder::new()
        .prefix("gpuhook-mps-users-")
        .tempdir()
        .unwrap();
    // MPS servers run as their client's user and reach the pipe directory through the host path:
    // every directory above it must be searchable by that user.
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let node = tmp.path().join("node");
    run_ok(
        Command::new(built("gpuhook-sim"))
            .args(["build", "l20"])
            .arg(&node),
    );
    let (mps, cdi) = (tmp.path().join("mps"), tmp.path().join("cdi"));
    let runtime_config = tmp.path().join("gpuhook.toml");
    std::fs::write(
        &runtime_config,
        format!(
            "cdi-spec-dirs = [\"{}\"]\n[runtime]\nruntimes = [\"runc\"]\ngenerate-missing = false\n",
            cdi.display()
        ),
    )
    .unwrap();
    let rootfs = tmp.path().join("rootfs");
    busybox_rootfs(&rootfs, false);
    Rig {
        tmp,
        node,
        mps,
        cdi,
        runtime_config,
        rootfs,
    }
}

impl Rig {
    fn start_daemon(&self, extra: &str) -> Daemon {
        let config = self.tmp.path().join("mps.yaml");
        write_config(&config, &self.mps, &self.node, &self.cdi, extra);
        let d = Daemon::start(&config, None, &self.tmp.path().join("daemon.log"));
        d.wait_ready(
            &self.mps,
            &self.cdi.join("nvidia.com-gpu-mps.json"),
            0,
            |_| true,
        );
        d
    }

    /// Runs container `id` as `uid` with the share through gpuhook-runtime; Err(stderr) when
    /// it does not start.
    fn run(&self, ids: &mut Containers, id: &str, uid: u32) -> Result<(), String> {
        let bundle = self.tmp.path().join(format!("bundle-{id}"));
        std::fs::create_dir_all(&bundle).unwrap();
        run_ok(Command::new("runc").arg("spec").current_dir(&bundle));
        let path = bundle.join("config.json");
        let mut oci: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        oci["process"]["terminal"] = json!(false);
        oci["process"]["args"] = json!(["sleep", "1000"]);
        oci["process"]["user"] = json!({"uid": uid, "gid": uid});
        oci["root"] = json!({"path": self.rootfs, "readonly": false});
        oci["linux"]["namespaces"]
            .as_array_mut()
            .unwrap()
            .retain(|n| n["type"] != "pid");
        for lib in ["/lib/x86_64-linux-gnu", "/lib64"] {
            oci["mounts"].as_array_mut().unwrap().push(json!({
                "destination": lib, "type": "bind", "source": lib, "options": ["rbind", "ro"]
            }));
        }
        oci["annotations"] = json!({"cdi.k8s.io/gpuhook-mps_0": "nvidia.com/gpu-mps=0"});
        std::fs::write(&path, serde_json::to_vec(&oci).unwrap()).unwrap();
        let id = format!("{id}-{}", std::process::id());
        ids.0.push(id.clone());
        let err = self.tmp.path().join(format!("{id}.err"));
        let st = Command::new(built("gpuhook-runtime"))
            .env("GPUHOOK_CONFIG", &self.runtime_config)
            .args(["run", "--detach", "--bundle"])
            .arg(&bundle)
            .arg(&id)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&err).unwrap())
            .status()
            .unwrap();
        let text = std::fs::read_to_string(&err).unwrap_or_default();
        if st.success() {
            Ok(())
        } else {
            Err(text)
        }
    }

    fn gpu0(&self) -> Option<Value> {
        status_json(&self.mps)?["gpus"]
            .as_array()?
            .iter()
            .find(|g| g["index"] == 0)
            .cloned()
    }
}

/// A CUDA client in container `id` (as its user), holding the GPU; returns its stdout lines.
fn client_in(id: &str) -> (std::process::Child, BufReader<std::process::ChildStdout>) {
    let id = format!("{id}-{}", std::process::id());
    let mut c = Command::new("runc")
        .args([
            "exec",
            &id,
            "/usr/bin/nvidia-cuda-mps-control",
            "--sim-client",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let out = BufReader::new(c.stdout.take().unwrap());
    (c, out)
}

/// The client's first line that is not `pending` (empty: it ended before it was served).
fn attached(r: &mut BufReader<std::process::ChildStdout>) -> String {
    loop {
        let mut l = String::new();
        if r.read_line(&mut l).unwrap() == 0 || l.trim() != "pending" {
            return l.trim().to_string();
        }
    }
}

#[test]
fn mps_shares_serve_non_root_users_and_refuse_what_would_block_or_run_unlimited() {
    if !e2e_ready("mps_users", &["runc", "setpriv"]) {
        return;
    }
    let rig = rig();
    let mut ids = Containers(Vec::new());
    let daemon = rig.start_daemon("");
    // 1. uid 1000 is served, by a server running as uid 1000.
    rig.run(&mut ids, "u1000", 1000).unwrap();
    let (mut a, mut a_out) = client_in("u1000");
    let line = attached(&mut a_out);
    assert!(
        line.starts_with("server="),
        "{line}; log:\n{}",
        daemon.log_text()
    );
    let g = wait_for("uid 1000's server and client in status", || {
        rig.gpu0().filter(|g| {
            g["usage"]["serverUsers"]
                .as_object()
                .is_some_and(|u| u.values().any(|v| *v == 1000))
                && !g["usage"]["clients"].as_array().is_some_and(Vec::is_empty)
        })
    });
    // 2. uid 2000 waits behind uid 1000; a container of uid 2000 is refused, naming uid 1000.
    let err = rig.run(&mut ids, "u2000", 2000).unwrap_err();
    assert!(
        err.contains("in use by uid 1000") && err.contains("uid 2000"),
        "{err}; {g}"
    );
    let pipe = rig.mps.join(g["uuid"].as_str().unwrap()).join("pipe");
    let mut waiting = Command::new("setpriv")
        .args(["--reuid", "2000", "--regid", "2000", "--clear-groups"])
        .arg(rig.node.join("usr/bin/nvidia-cuda-mps-control"))
        .args(["--sim-client", "--hold", "0"])
        .env_clear()
        .env("CUDA_MPS_PIPE_DIRECTORY", &pipe)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut w_out = BufReader::new(waiting.stdout.take().unwrap());
    let mut first = String::new();
    w_out.read_line(&mut first).unwrap();
    assert_eq!(first.trim(), "pending");
    let waited_from = Instant::now();
    wait_for("the waiting client reported", || {
        rig.gpu0()
            .filter(|g| g["usage"]["waitingClients"][0]["uid"] == 2000)
    });
    std::thread::sleep(std::time::Duration::from_millis(500));
    // Deleting the container ends its client (killing `runc exec` would not).
    let a_id = format!("u1000-{}", std::process::id());
    run_ok(Command::new("runc").args(["delete", "-f", &a_id]));
    let _ = a.wait();
    let served = attached(&mut w_out);
    eprintln!(
        "measured: a uid-2000 client waited {} ms, until uid 1000's client ended ({served})",
        waited_from.elapsed().as_millis()
    );
    assert!(served.starts_with("server="), "{served}");
    let _ = waiting.wait();
    drop(daemon);
    check_client_user(&rig, &mut ids);
}

/// 3 and 4: `clientUser` refuses other users; a share with no ready daemon refuses everyone.
fn check_client_user(rig: &Rig, ids: &mut Containers) {
    let daemon = rig.start_daemon("  clientUser: 1000\n");
    let err = rig.run(ids, "root-refused", 0).unwrap_err();
    assert!(
        err.contains("admits only uid 1000") && err.contains("mpsDaemon.clientUser"),
        "{err}"
    );
    rig.run(ids, "u1000-again", 1000).unwrap();
    // The spec outlives the daemon in a spec dir it does not own: keep a copy, stop the daemon.
    let spec = rig.cdi.join("nvidia.com-gpu-mps.json");
    let keep = std::fs::read(&spec).unwrap();
    drop(daemon);
    std::fs::create_dir_all(&rig.cdi).unwrap();
    std::fs::write(&spec, keep).unwrap();
    let err = rig.run(ids, "not-ready", 1000).unwrap_err();
    assert!(
        err.contains("not ready") && err.contains("without MPS limits"),
        "{err}"
    );
    let _ = std::fs::remove_file(&spec);
    let _ = Path::new(&spec);
}
