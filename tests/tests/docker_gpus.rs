//! `docker run --gpus` and `docker run --runtime gpuhook` with the real Docker (Debian's docker.io
//! 20.10) on a simulated dgx-h100, where NVML index and device minor differ (index 0 is
//! `/dev/nvidia2`): each test starts a private dockerd (see `docker_support`).
//!
//! What dockerd does for `--gpus` (moby `daemon/nvidia_linux.go`): it looks up
//! `nvidia-container-runtime-hook` on its own PATH at start, and for a GPU request adds
//! `NVIDIA_VISIBLE_DEVICES` (`all` for `all`, `0,…,N-1` for a count N, the listed ids for
//! `device=`), `NVIDIA_DRIVER_CAPABILITIES` when `capabilities=` names driver capabilities, and a
//! prestart hook `[nvidia-container-runtime-hook, prestart]` with dockerd's environment. Here that
//! name is a link to `gpuhook` in a directory on the private dockerd's PATH, and `GPUHOOK_CONFIG`
//! in dockerd's environment points the hook at the simulated node.
//!
//! Expected devices follow libnvidia-container (facts in shared/reference): a selected GPU is
//! `/dev/nvidia<minor>` (195:minor), `/dev/nvidiactl` always, `/dev/nvidia-uvm{,-tools}` with
//! the compute capability (default capabilities `utility,compute`), compute libraries
//! (`libcuda.so.<ver>`) only with compute. Opening an injected node gives ENXIO (the device cgroup
//! allows it; no driver behind it); a host node bind-mounted in without being requested gives
//! EPERM (the cgroup denies it).

// Integration tests: a failed unwrap or expect is the test failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod docker_support;
mod prestart_support;

#[path = "docker_gpus/seen.rs"]
mod seen;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Output};

use docker_support::Dockerd;
use prestart_support::Node;
use seen::{Seen, SCRIPT};

const IMAGE: &str = "gpuhook-e2e/busybox:latest";

/// A private dockerd serving a simulated node, with the busybox image imported.
struct Rig {
    // Dropped in this order: dockerd and its processes and mounts first, then its dir.
    docker: Dockerd,
    dir: tempfile::TempDir,
    node: Node,
}

impl Rig {
    /// dockerd's PATH starts with a dir holding `nvidia-container-runtime-hook` -> gpuhook.
    fn new(daemon_json: Option<&Path>) -> Rig {
        let node = prestart_support::node("dgx-h100", "");
        let dir = tempfile::Builder::new()
            .prefix("gpuhook-docker-")
            .tempdir()
            .unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        std::os::unix::fs::symlink(
            gpuhook_e2e::built("gpuhook"),
            bin.join("nvidia-container-runtime-hook"),
        )
        .unwrap();
        if let Some(json) = daemon_json {
            std::fs::copy(json, dir.path().join("daemon.json")).unwrap();
        }
        let path = format!("{}:/usr/sbin:/usr/bin:/sbin:/bin", bin.display());
        let docker = Dockerd::start(
            dir.path(),
            &serde_json::json!({}),
            &path,
            &[("GPUHOOK_CONFIG", node.config.as_path())],
        );
        let rootfs = gpuhook_e2e::busybox_rootfs(&dir.path().join("rootfs"), true);
        docker.import(&rootfs, IMAGE);
        Rig { docker, dir, node }
    }

    /// `docker run --rm --network none ARGS IMAGE sh -c SCRIPT`, binding `deny` (host nodes of
    /// the simulated node, by name) under /host.
    fn run(&self, args: &[&str], deny: &[String]) -> Output {
        let mut argv: Vec<String> = ["run", "--rm", "--network", "none"]
            .iter()
            .chain(args)
            .map(|s| s.to_string())
            .collect();
        for name in deny {
            let host = self.node.root.join("dev").join(name);
            argv.extend(["-v".into(), format!("{}:/host/{name}", host.display())]);
        }
        argv.extend([IMAGE.into(), "sh".into(), "-c".into(), SCRIPT.into()]);
        self.docker.docker(&argv)
    }

    /// Runs and parses; panics with dockerd's log when the container failed.
    fn seen(&self, args: &[&str], deny: &[String]) -> Seen {
        let out = self.run(args, deny);
        let (stdout, stderr) = prestart_support::text(&out);
        assert!(
            out.status.success(),
            "docker run {args:?} failed: {stderr}\nhook log:\n{}\ndockerd:\n{}",
            std::fs::read_to_string(&self.node.log).unwrap_or_default(),
            self.docker.log_text()
        );
        Seen::parse(&stdout)
    }

    /// `/dev/nvidia<minor>` of the GPU at NVML index `i`.
    fn gpu_node(&self, i: usize) -> (String, u32, u32) {
        let g = self
            .node
            .inventory
            .gpus
            .iter()
            .find(|g| g.index as usize == i)
            .unwrap();
        (format!("/dev/nvidia{}", g.minor), 195, g.minor)
    }

    fn uvm(&self) -> [(String, u32, u32); 2] {
        let major = self.node.inventory.majors.nvidia_uvm.expect("uvm major");
        [
            ("/dev/nvidia-uvm".into(), major, 0),
            ("/dev/nvidia-uvm-tools".into(), major, 1),
        ]
    }
}

fn ready(test: &str) -> bool {
    gpuhook_e2e::e2e_ready(
        test,
        &["dockerd", "docker", "runc", "containerd", "ldconfig"],
    )
}

#[test]
fn docker_run_gpus_on_dgx_h100() {
    if !ready("docker_gpus::docker_run_gpus_on_dgx_h100") {
        return;
    }
    let host_files = ["/etc/docker/daemon.json", "/etc/docker/key.json"];
    let existed = host_files.map(|p| Path::new(p).exists());
    let rig = Rig::new(None);
    gpus_all(&rig);
    gpus_device_by_index_and_uuid(&rig);
    gpus_count(&rig);
    gpus_capabilities(&rig);
    no_gpus_and_unknown_devices(&rig);
    doctor_sees_the_hook(&rig);
    // The machine's Docker configuration was not touched by this daemon.
    for (p, existed) in host_files.iter().zip(existed) {
        assert!(existed || !Path::new(p).exists(), "{p} was created");
    }
    assert!(
        rig.dir.path().join("key.json").exists(),
        "the trust key went to the temp dir"
    );
}

/// `--gpus all`: every GPU by its minor, the control and UVM nodes, NVML and CUDA mounted.
fn gpus_all(rig: &Rig) {
    let s = rig.seen(&["--gpus", "all"], &[]);
    let mut want: BTreeSet<_> = (0..8).map(|i| rig.gpu_node(i)).collect();
    want.insert(("/dev/nvidiactl".into(), 195, 255));
    want.extend(rig.uvm());
    assert_eq!(s.nodes, want, "--gpus all: {s:?}");
    s.assert_cgroup("--gpus all");
    assert!(
        s.has_lib("libnvidia-ml.so.") && s.has_lib("libcuda.so."),
        "{s:?}"
    );
    assert_eq!(
        s.env,
        ["NVIDIA_VISIBLE_DEVICES=all"],
        "dockerd sets no capabilities"
    );
}

/// `--gpus '"device=1"'`: NVML index 1 (not minor 1); the GPU at minor 1 bound in is denied.
fn gpus_device_by_index_and_uuid(rig: &Rig) {
    let one = rig.gpu_node(1);
    assert_ne!(
        one.0, "/dev/nvidia1",
        "the profile must tell index and minor apart"
    );
    let s = rig.seen(&["--gpus", "\"device=1\""], &["nvidia1".into()]);
    let mut want = BTreeSet::from([one.clone(), ("/dev/nvidiactl".into(), 195, 255)]);
    want.extend(rig.uvm());
    assert_eq!(s.nodes, want, "device=1: {s:?}");
    assert!(s.open.iter().any(|(p, _)| p == "/host/nvidia1"), "{s:?}");
    s.assert_cgroup("device=1");
    // Two devices by UUID and index (the quoted CSV form Docker documents).
    let uuid = &rig
        .node
        .inventory
        .gpus
        .iter()
        .find(|g| g.index == 5)
        .unwrap()
        .uuid;
    let s = rig.seen(&["--gpus", &format!("\"device={uuid},2\"")], &[]);
    let got: BTreeSet<_> = s
        .nodes
        .iter()
        .filter(|n| n.1 == 195 && n.2 < 128)
        .cloned()
        .collect();
    assert_eq!(
        got,
        BTreeSet::from([rig.gpu_node(5), rig.gpu_node(2)]),
        "{s:?}"
    );
    s.assert_cgroup("device=uuid,2");
}

/// `--gpus 2`: dockerd asks for indexes 0 and 1.
fn gpus_count(rig: &Rig) {
    let s = rig.seen(&["--gpus", "2"], &[]);
    assert_eq!(s.env, ["NVIDIA_VISIBLE_DEVICES=0,1"]);
    let got: BTreeSet<_> = s
        .nodes
        .iter()
        .filter(|n| n.1 == 195 && n.2 < 128)
        .cloned()
        .collect();
    assert_eq!(
        got,
        BTreeSet::from([rig.gpu_node(0), rig.gpu_node(1)]),
        "{s:?}"
    );
    s.assert_cgroup("--gpus 2");
}

/// `capabilities=utility`: NVML, no CUDA and no UVM nodes.
fn gpus_capabilities(rig: &Rig) {
    let s = rig.seen(&["--gpus", "all,capabilities=utility"], &[]);
    assert!(
        s.env
            .contains(&"NVIDIA_DRIVER_CAPABILITIES=utility".to_string()),
        "{s:?}"
    );
    assert!(s.has_lib("libnvidia-ml.so."), "{s:?}");
    assert!(!s.has_lib("libcuda.so."), "utility only: {s:?}");
    assert!(
        !s.nodes.iter().any(|n| n.0.starts_with("/dev/nvidia-uvm")),
        "{s:?}"
    );
    assert!(s.nodes.contains(&rig.gpu_node(7)), "{s:?}");
}

/// No `--gpus`: nothing. An unknown device: the start is refused, naming it.
fn no_gpus_and_unknown_devices(rig: &Rig) {
    let s = rig.seen(&[], &["nvidia0".into()]);
    assert!(s.nodes.is_empty() && s.mounts.is_empty(), "{s:?}");
    s.assert_cgroup("no --gpus");
    let out = rig.run(&["--gpus", "\"device=99\""], &[]);
    let (stdout, stderr) = prestart_support::text(&out);
    assert!(
        !out.status.success(),
        "a GPU container without its GPU started: {stdout}"
    );
    assert!(
        stderr.contains("99"),
        "the error names the device: {stderr}"
    );
}

/// `gpuhook doctor` finds the link on dockerd's PATH and knows it is gpuhook.
fn doctor_sees_the_hook(rig: &Rig) {
    let path = format!(
        "{}:/usr/sbin:/usr/bin",
        rig.dir.path().join("bin").display()
    );
    let out = Command::new(gpuhook_e2e::built("gpuhook"))
        .args(["--config"])
        .arg(&rig.node.config)
        .args([
            "doctor",
            "--json",
            "--engine-path",
            &path,
            "--docker-config",
        ])
        .arg(rig.dir.path().join("daemon.json"))
        .output()
        .unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let f: Vec<_> = doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["check"] == "docker-gpus" || f["check"] == "docker")
        .collect();
    assert_eq!(f.len(), 2, "{doc:#}");
    assert_eq!(f[0]["status"], "ok", "{:#}", f[0]);
    assert!(
        f[0]["message"]
            .as_str()
            .unwrap()
            .contains("gpuhook prestart"),
        "{:#}",
        f[0]
    );
}

#[test]
fn docker_run_runtime_gpuhook_from_runtime_configure() {
    if !ready("docker_gpus::docker_run_runtime_gpuhook_from_runtime_configure") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let json = tmp.path().join("daemon.json");
    let key = tmp.path().join("key.json");
    let before = format!(
        "{{\n  \"log-level\": \"info\",\n  \"deprecated-key-path\": {:?}\n}}\n",
        key.display().to_string()
    );
    std::fs::write(&json, &before).unwrap();
    let configure = |expect: i32| {
        let out = Command::new(gpuhook_e2e::built("gpuhook"))
            .args([
                "runtime",
                "configure",
                "--runtime",
                "docker",
                "--runtime-config",
            ])
            .arg(&json)
            .arg("--binary")
            .arg(gpuhook_e2e::built("gpuhook-runtime"))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(expect), "{out:?}");
    };
    configure(0);
    configure(3);
    let text = std::fs::read_to_string(&json).unwrap();
    assert!(
        text.starts_with("{\n  \"log-level\": \"info\",\n  \"deprecated-key-path\""),
        "{text}"
    );
    let rig = Rig::new(Some(&json));
    let s = rig.seen(
        &["--runtime", "gpuhook", "-e", "NVIDIA_VISIBLE_DEVICES=1"],
        &["nvidia1".into()],
    );
    assert!(s.nodes.contains(&rig.gpu_node(1)), "{s:?}");
    let gpus: Vec<_> = s.nodes.iter().filter(|n| n.1 == 195 && n.2 < 128).collect();
    assert_eq!(gpus, [&rig.gpu_node(1)], "only index 1: {s:?}");
    assert!(
        s.nodes.contains(&("/dev/nvidiactl".into(), 195, 255)),
        "{s:?}"
    );
    assert!(s.has_lib("libnvidia-ml.so."), "{s:?}");
    s.assert_cgroup("--runtime gpuhook");
    let s = rig.seen(&["--runtime", "gpuhook"], &[]);
    assert!(
        s.nodes.is_empty() && s.mounts.is_empty(),
        "no request, nothing: {s:?}"
    );
}
