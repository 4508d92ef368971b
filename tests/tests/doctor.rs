//! `gpuhook doctor` on simulated nodes: a healthy node is all ok (exit 0); each broken link —
//! NVML missing, a spec left stale by a MIG re-partition, a second spec in /etc/cdi defining our
//! devices, a containerd config without our runtime, an MPS GPU that is not ready, a container
//! asking for a device the node lacks — fails its check with the fix (exit 1), and the doctor
//! writes nothing.
//!
//! The node's directories (/etc/cdi, /var/run/cdi, containerd's config, kubelet's plugin dir, the
//! MPS root, the runc state root) are all under a temp dir and passed as flags.

// Integration tests: a failed unwrap or expect is the test failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cdi_support;

use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

use cdi_support::{build_node, gpuhook_cmd, gpuhook_ok, s, tmp, write};
use gpuhook_sim::{materialise, MaterialiseOptions, NodeProfile};
use serde_json::Value;

const CHECKS: [&str; 9] = [
    "driver-root",
    "nvml",
    "cdi-spec",
    "cdi-spec-fresh",
    "cdi-conflicts",
    "inventory-cache",
    "containerd",
    "device-plugin",
    "mps-daemon",
];

/// A healthy simulated node: spec generated, containerd configured, NVIDIA's plugin registered.
struct Node {
    dir: tempfile::TempDir,
    _plugin: UnixListener,
}

impl Node {
    fn new(tag: &str) -> Node {
        let dir = tmp(&format!("doctor-{tag}"));
        let d = dir.path();
        build_node("h100-mig", &d.join("node"));
        for sub in ["etc/cdi", "run/cdi", "plugins", "runc"] {
            std::fs::create_dir_all(d.join(sub)).unwrap();
        }
        write(&d.join("config.toml"), "");
        let node = Node {
            _plugin: UnixListener::bind(d.join("plugins/nvidia-gpu.sock")).expect("bind socket"),
            dir,
        };
        node.refresh();
        gpuhook_ok(&[
            "runtime",
            "configure",
            "--containerd-config",
            s(&node.path("containerd.toml")),
            "--binary",
            s(&gpuhook_e2e::built("gpuhook-runtime")),
        ]);
        node
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn refresh(&self) {
        gpuhook_ok(&[
            "--config",
            s(&self.path("config.toml")),
            "cdi",
            "refresh",
            "--driver-root",
            s(&self.path("node")),
            "--output",
            s(&self.path("run/cdi")),
            "--inventory-cache",
            s(&self.path("inventory.json")),
        ]);
    }

    /// Runs the doctor (JSON); returns (exit code, findings).
    fn doctor(&self, extra: &[&str]) -> (i32, Vec<Value>) {
        let (config, root) = (self.path("config.toml"), self.path("node"));
        let (etc, run) = (self.path("etc/cdi"), self.path("run/cdi"));
        let (cache, ctd) = (self.path("inventory.json"), self.path("containerd.toml"));
        let (drop_in, plugins) = (self.path("conf.d/99-gpuhook.toml"), self.path("plugins"));
        let (mps, runtime) = (self.path("mps"), gpuhook_e2e::built("gpuhook-runtime"));
        let (engines, docker) = (self.path("no-engines"), self.path("docker/daemon.json"));
        let mut args = vec![
            "--config",
            s(&config),
            "doctor",
            "--json",
            "--driver-root",
            s(&root),
            "--spec-dir",
            s(&etc),
            "--spec-dir",
            s(&run),
            "--inventory-cache",
            s(&cache),
            "--containerd-config",
            s(&ctd),
            "--containerd-drop-in",
            s(&drop_in),
            "--runtime-binary",
            s(&runtime),
            "--device-plugin-dir",
            s(&plugins),
            "--mps-root",
            s(&mps),
            // No Docker or CRI-O on this simulated node (tests/tests/docker_gpus.rs has Docker).
            "--engine-path",
            s(&engines),
            "--docker-config",
            s(&docker),
        ];
        args.extend_from_slice(extra);
        let before = listing(self.dir.path());
        let out = gpuhook_cmd(&args).output().expect("run gpuhook doctor");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let doc: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
            panic!(
                "doctor --json: {e}\n{stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
        assert_eq!(
            listing(self.dir.path()),
            before,
            "the doctor wrote something"
        );
        let findings = doc["findings"].as_array().expect("findings").clone();
        (out.status.code().expect("exit code"), findings)
    }
}

/// Every path under `dir` with its size and mtime (to prove the doctor writes nothing).
fn listing(dir: &Path) -> Vec<(PathBuf, u64, i64)> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            if m.is_dir() {
                stack.push(p.clone());
            }
            out.push((p, m.len(), m.mtime_nsec()));
        }
    }
    out.sort();
    out
}

fn status<'a>(findings: &'a [Value], check: &str) -> Vec<&'a str> {
    findings
        .iter()
        .filter(|f| f["check"] == check)
        .map(|f| f["status"].as_str().unwrap())
        .collect()
}

/// The one failing finding of `check`; its message and fix must contain the needles.
fn assert_fails(findings: &[Value], check: &str, message: &str, fix: &str) {
    let failed: Vec<&Value> = findings
        .iter()
        .filter(|f| f["check"] == check && f["status"] == "fail")
        .collect();
    assert!(!failed.is_empty(), "{check} must fail: {findings:#?}");
    let f = failed[0];
    let (m, x) = (
        f["message"].as_str().unwrap(),
        f["fix"].as_str().unwrap_or(""),
    );
    assert!(
        m.contains(message),
        "{check} message lacks {message:?}: {m}"
    );
    assert!(x.contains(fix), "{check} fix lacks {fix:?}: {x}");
}

fn ready() -> bool {
    gpuhook_e2e::e2e_ready("doctor", &["ldconfig"])
}

#[test]
fn a_healthy_node_is_all_ok() {
    if !ready() {
        return;
    }
    let node = Node::new("healthy");
    let (code, findings) = node.doctor(&[]);
    for check in CHECKS {
        assert!(
            !status(&findings, check).is_empty(),
            "no {check} finding: {findings:#?}"
        );
    }
    let not_ok: Vec<&Value> = findings.iter().filter(|f| f["status"] != "ok").collect();
    assert!(not_ok.is_empty(), "healthy node: {not_ok:#?}");
    assert_eq!(code, 0);
}

#[test]
fn missing_nvml_fails_the_nvml_check() {
    if !ready() {
        return;
    }
    let node = Node::new("nvml");
    let lib = node.path("node/usr/lib/x86_64-linux-gnu");
    for e in std::fs::read_dir(&lib).unwrap() {
        let p = e.unwrap().path();
        if p.file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("libnvidia-ml.so")
        {
            std::fs::remove_file(p).unwrap();
        }
    }
    let (code, findings) = node.doctor(&[]);
    assert_fails(
        &findings,
        "nvml",
        "libnvidia-ml.so.1 not found",
        "libnvidia-ml.so.1",
    );
    assert_eq!(status(&findings, "driver-root"), ["ok"]);
    assert_eq!(code, 1);
}

#[test]
fn a_spec_left_stale_by_a_mig_repartition_fails_until_refreshed() {
    if !ready() {
        return;
    }
    let node = Node::new("stale");
    let mut p = NodeProfile::builtin("h100-mig").unwrap();
    p.gpus[0].mig_devices.truncate(2);
    p.name = "h100-mig-2".into();
    let opts = MaterialiseOptions {
        mock_nvml: Some(gpuhook_e2e::mock_nvml_lib()),
        bin_dir: Some(gpuhook_e2e::bin_dir()),
        ldconfig: None,
    };
    materialise(&p, &node.path("node"), &opts).expect("re-partition");
    let (code, findings) = node.doctor(&[]);
    assert_fails(
        &findings,
        "cdi-spec-fresh",
        "another MIG layout",
        "gpuhook cdi refresh",
    );
    assert_eq!(code, 1);
    node.refresh();
    let (code, findings) = node.doctor(&[]);
    assert_eq!(status(&findings, "cdi-spec-fresh"), ["ok"], "{findings:#?}");
    assert_eq!(code, 0);
}

#[test]
fn a_second_spec_in_etc_cdi_is_a_conflict() {
    if !ready() {
        return;
    }
    let node = Node::new("conflict");
    // A copy under NVIDIA's name: the same nvidia.com/gpu devices in /etc/cdi.
    std::fs::copy(
        node.path("run/cdi/nvidia.com-gpu.json"),
        node.path("etc/cdi/nvidia.json"),
    )
    .unwrap();
    let (code, findings) = node.doctor(&[]);
    assert_fails(
        &findings,
        "cdi-conflicts",
        "nvidia.com/gpu=0:0",
        "etc/cdi/nvidia.json",
    );
    assert_eq!(code, 1);
}

#[test]
fn a_containerd_config_without_our_runtime_fails() {
    if !ready() {
        return;
    }
    let node = Node::new("containerd");
    write(
        &node.path("containerd.toml"),
        "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n\
         runtime_type = \"io.containerd.runc.v2\"\n",
    );
    let (code, findings) = node.doctor(&[]);
    assert_fails(
        &findings,
        "containerd",
        "no runtime `gpuhook`",
        "gpuhook runtime configure",
    );
    assert_eq!(code, 1);
}

#[test]
fn an_mps_gpu_that_is_not_ready_fails() {
    if !ready() {
        return;
    }
    let node = Node::new("mps");
    let uuid = "GPU-fd8da993-f3cd-7ebd-8145-12144134a43b";
    let status_json = serde_json::json!({"gpus": [
        {"uuid": uuid, "state": "failed", "lastError": "nvidia-cuda-mps-control exited"}]});
    write(&node.path("mps/status.json"), &status_json.to_string());
    let (code, findings) = node.doctor(&[]);
    assert_fails(&findings, "mps-daemon", "exited", "gpu-mps-daemon status");
    assert_eq!(code, 1);
    // Ready in status.json but without its ready file is not ready either.
    let ready_json = serde_json::json!({"gpus": [{"uuid": uuid, "state": "ready"}]});
    write(&node.path("mps/status.json"), &ready_json.to_string());
    let (_, findings) = node.doctor(&[]);
    assert_fails(&findings, "mps-daemon", "no ready file", "/readyz");
    write(&node.path(&format!("mps/{uuid}/ready")), "");
    let (code, findings) = node.doctor(&[]);
    assert_eq!(status(&findings, "mps-daemon"), ["ok"], "{findings:#?}");
    assert_eq!(code, 0);
}

/// A runc state dir for container `id` whose bundle's config.json sets NVIDIA_VISIBLE_DEVICES.
fn container(node: &Node, id: &str, visible: &str) {
    let bundle = node.path(&format!("bundles/{id}"));
    let state =
        serde_json::json!({"id": id, "config": {"labels": [format!("bundle={}", s(&bundle))]}});
    write(
        &node.path(&format!("runc/{id}/state.json")),
        &state.to_string(),
    );
    let config = serde_json::json!({"ociVersion": "1.0.2", "process": {
        "args": ["sh"], "cwd": "/", "env": [format!("NVIDIA_VISIBLE_DEVICES={visible}")]},
        "root": {"path": "rootfs"}});
    write(&bundle.join("config.json"), &config.to_string());
}

#[test]
fn a_container_is_explained() {
    if !ready() {
        return;
    }
    let node = Node::new("container");
    container(&node, "good", "0:1");
    container(&node, "bad", "0:9");
    let runc = node.path("runc");
    let (code, findings) = node.doctor(&["--container", "good", "--runc-root", s(&runc)]);
    let f = findings
        .iter()
        .find(|f| f["check"] == "container")
        .expect("container finding");
    assert_eq!(f["status"], "ok", "{f}");
    assert!(f["message"].as_str().unwrap().contains("MIG 0:1"), "{f}");
    assert_eq!(code, 0);
    let (code, findings) = node.doctor(&["--container", "bad", "--runc-root", s(&runc)]);
    assert_fails(&findings, "container", "0:9", "gpuhook cdi list");
    assert_eq!(code, 1);
}

#[test]
fn every_help_shows_an_example() {
    for args in [&["doctor", "--help"][..], &["cdi", "refresh", "--help"][..]] {
        let out = gpuhook_cmd(args).output().expect("gpuhook --help");
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{args:?}: {help}");
        assert!(
            help.contains("Examples:") && help.contains("gpuhook "),
            "{args:?}: {help}"
        );
    }
}
