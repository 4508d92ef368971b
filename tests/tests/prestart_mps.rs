//! `gpuhook prestart` honours the MPS shares `gpu-mps-daemon` publishes.
//!
//! On a simulated L20 node the daemon starts one simulated control daemon per GPU and writes its
//! `nvidia.com/gpu-mps` CDI spec into a temp CDI directory; the hook's config points
//! `cdi-spec-dirs` at it. A busybox container run by plain runc (no CDI support) with the
//! annotation `nvidia.com/gpu-mps=0` gets, from the hook alone: GPU 0's node (opening it gives
//! ENXIO: no driver behind the simulated node, but the device cgroup allows it), the daemon's pipe
//! directory at `/tmp/nvidia-mps` (its `control` socket is there) and the daemon's shared
//! `/dev/shm` (a file written inside appears on the host). An unknown share fails the start with
//! `unresolvable CDI devices` before anything is injected. The env edits cannot be applied by a
//! hook: the log names them.

mod prestart_support;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use prestart_support::{node, text, Bundle};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(60);

/// The daemon; SIGTERM, then SIGKILL after [`WAIT`], on drop.
struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        // SAFETY: kill(2) of our own child, not reaped yet.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let start = Instant::now();
        while self.0.try_wait().ok().flatten().is_none() && start.elapsed() < WAIT {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn status_json(mps: &Path) -> Option<Value> {
    serde_json::from_slice(&std::fs::read(mps.join("status.json")).ok()?).ok()
}

const SCRIPT: &str = r#"
[ -c /dev/nvidia0 ] && echo "NODE $(stat -c '%t:%T' /dev/nvidia0)"
echo "OPEN $(cat /dev/nvidia0 2>&1 </dev/null | head -n1)"
for f in /tmp/nvidia-mps/*; do echo "PIPE ${f##*/}"; done
echo from-container > /dev/shm/gpuhook-prestart-mps && echo SHM-WRITTEN
exit 0
"#;

#[test]
fn prestart_injects_the_mps_share_and_refuses_an_unknown_one() {
    if !gpuhook_e2e::e2e_ready("prestart_mps", &["runc"]) {
        return;
    }
    let tmp = tempfile::Builder::new()
        .prefix("gpuhook-prestart-mps-")
        .tempdir()
        .unwrap();
    let (mps, cdi) = (tmp.path().join("mps"), tmp.path().join("cdi"));
    let n = node("l20", &format!("cdi-spec-dirs = [{cdi:?}]"));
    let config = tmp.path().join("mps.yaml");
    std::fs::write(
        &config,
        format!(
            "version: v1\nsharing:\n  mps:\n    resources:\n      - {{name: nvidia.com/gpu, replicas: 4, devices: all}}\nmpsDaemon:\n  mpsRoot: {}\n  driverRoot: {}\n  cdiSpecDir: {}\n  gpuhookPath: {}\n  shmSize: 16Mi\n  probeInterval: 300ms\n",
            mps.display(),
            n.root.display(),
            cdi.display(),
            gpuhook_e2e::built("gpuhook").display()
        ),
    )
    .unwrap();
    let log = tmp.path().join("daemon.log");
    let daemon = Daemon(
        Command::new(gpuhook_e2e::built("gpu-mps-daemon"))
            .arg("--config")
            .arg(&config)
            .arg("--cdi-spec-dir")
            .arg(&cdi)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let spec_file = cdi.join("nvidia.com-gpu-mps.json");
    let start = Instant::now();
    let uuid = loop {
        let ready = status_json(&mps).and_then(|s| {
            let g = s["gpus"]
                .as_array()?
                .iter()
                .find(|g| g["index"] == 0 && g["state"] == "ready")?;
            g["uuid"].as_str().map(str::to_string)
        });
        if let Some(u) = ready.filter(|_| spec_file.exists()) {
            break u;
        }
        assert!(
            start.elapsed() < WAIT,
            "daemon not ready: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let host_shm = mps.join(&uuid).join("shm");
    let minor = n.inventory.gpu(0).expect("GPU 0").minor;

    let mut b = Bundle::new(SCRIPT, true);
    b.hook(n.hook());
    b.config["annotations"] = serde_json::json!({ "cdi.k8s.io/mps": "nvidia.com/gpu-mps=0" });
    let (id, out) = b.run("mps");
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "runc run: {stdout}\n{stderr}");
    assert!(
        stdout.lines().any(|l| l == format!("NODE c3:{minor:x}")),
        "{stdout}"
    );
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("OPEN ") && l.contains("No such device or address")),
        "{stdout}"
    );
    assert!(stdout.lines().any(|l| l == "PIPE control"), "{stdout}");
    assert!(stdout.lines().any(|l| l == "SHM-WRITTEN"), "{stdout}");
    assert_eq!(
        std::fs::read_to_string(host_shm.join("gpuhook-prestart-mps")).unwrap(),
        "from-container\n"
    );
    // The env edits are named in the log, not silently dropped.
    let env_line = n
        .decisions(&id)
        .into_iter()
        .find(|l| l["fields"]["outcome"] == "env-not-applied")
        .unwrap_or_else(|| panic!("no env-not-applied decision: {:?}", n.log_lines()));
    let keys = env_line["fields"]["env"].as_str().unwrap();
    assert!(keys.contains("CUDA_MPS_PIPE_DIRECTORY"), "{keys}");
    assert!(keys.contains("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "{keys}");

    // An unknown share: the start fails with our message, nothing is injected.
    let mut bad = Bundle::new("echo STARTED", true);
    bad.hook(n.hook());
    bad.config["annotations"] =
        serde_json::json!({ "cdi.k8s.io/mps": "nvidia.com/gpu-mps=0-nope" });
    let (_, out) = bad.run("mps-unknown");
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success(), "{stdout}\n{stderr}");
    assert!(!stdout.contains("STARTED"), "{stdout}");
    assert!(
        stderr.contains("unresolvable CDI devices nvidia.com/gpu-mps=0-nope"),
        "{stderr}"
    );

    drop(daemon);
    // No mount of the node, the MPS root or a bundle is left on the host.
    let mounts = prestart_support::host_mountinfo();
    for p in [tmp.path(), n.dir.path(), b.dir.path(), bad.dir.path()] {
        let p = p.to_str().unwrap();
        assert!(!mounts.contains(p), "mount left under {p}:\n{mounts}");
    }
}
