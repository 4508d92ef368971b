//! The exporter binary with `-k` names the pods of GPU processes through a CRI runtime socket
//! (the fake runtime of `examples/fake_cri.rs`, labelled as the kubelet labels containers): the
//! whole chain NVML process list → `/proc/<pid>/cgroup` → container id → `ListContainers` → pod.
// Test support: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::{Child, Command};

use common::*;

const H100_3: &str = "GPU-f5697335-68e9-f228-da8c-f7af42e3b440";

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn pods_of_gpu_processes_are_named_through_the_cri_socket() {
    let fake = Path::new(BIN).parent().unwrap().join("examples/fake_cri");
    assert!(
        fake.is_file(),
        "{} missing: cargo test builds the examples",
        fake.display()
    );
    let node = Node::new("dgx-h100");
    let dir = node.dir.path();
    let (a, b) = (cid('a'), cid('b'));
    std::fs::write(
        dir.join("containers"),
        format!("{a} team trainer main\n{b} team notebook lab\n"),
    )
    .unwrap();
    let sock = dir.join("cri.sock");
    let _cri = Killed(
        Command::new(&fake)
            .arg(&sock)
            .arg(dir.join("containers"))
            .spawn()
            .unwrap(),
    );
    let proc_root = dir.join("proc");
    fake_proc(
        &proc_root,
        4001,
        &pod_cgroup("11111111-2222-3333-4444-555555555555", &a),
    );
    fake_proc(
        &proc_root,
        4002,
        &pod_cgroup("66666666-2222-3333-4444-555555555555", &b),
    );
    node.state(
        &format!("processes-{H100_3}"),
        "4001 compute 1500 20\n4002 graphics 250 3\n",
    );
    node.state(&format!("telemetry-{H100_3}"), "gpu_util 50\n");
    let (p, s) = (proc_root.display().to_string(), sock.display().to_string());
    let ex = Exporter::start(
        &node,
        &["-k", "-c", "200", "--proc-root", &p, "--cri-socket", &s],
    );
    let page = ex.wait_for(|p| {
        p.of("gpuhook_pod_fb_used")
            .any(|s| s.label("pod") == Some("notebook"))
    });
    let trainer = page.one(
        "gpuhook_pod_fb_used",
        &[("UUID", H100_3), ("pod", "trainer")],
    );
    assert_eq!(trainer.f(), 1500.0);
    assert_eq!(trainer.label("namespace"), Some("team"));
    assert_eq!(trainer.label("container"), Some("main"));
    let notebook = page.one(
        "gpuhook_pod_gpu_util",
        &[("UUID", H100_3), ("pod", "notebook")],
    );
    assert_eq!(notebook.f(), 3.0);
    assert_eq!(notebook.label("container"), Some("lab"));
}
