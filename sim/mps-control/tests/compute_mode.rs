//! The simulated CUDA client and MPS server honour the GPU's compute mode, read through the
//! node's NVML (the mock `libnvidia-ml.so.1`, found through `LD_LIBRARY_PATH`) as NVIDIA
//! documents it (CUDA Driver API `CUcomputemode`; `nvidia-smi(1)` "Compute Mode"):
//! PROHIBITED allows no context, EXCLUSIVE_PROCESS one per device, DEFAULT any number.
//!
//! Needs the mock NVML built next to the simulator (`cargo build -p gpuhook-mock-nvml`).
// Test support: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

use common::*;

const GPU0: &str = "GPU-11111111-1111-1111-1111-111111111111";
const GPU1: &str = "GPU-22222222-2222-2222-2222-222222222222";

/// A directory holding the mock NVML as `libnvidia-ml.so.1` and a profile of both test GPUs.
fn mock_nvml(dir: &Path) -> PathBuf {
    let mock = Path::new(BIN).with_file_name("libgpuhook_mock_nvml.so");
    assert!(
        mock.is_file(),
        "{} is missing: `cargo build -p gpuhook-mock-nvml` first",
        mock.display()
    );
    let lib = dir.join("nvml");
    std::fs::create_dir_all(lib.join("gpuhook-sim-state")).unwrap();
    std::fs::copy(&mock, lib.join("libnvidia-ml.so.1")).unwrap();
    let mut profile = String::from(
        "name = \"mps-compute-mode\"\ndriver_version = \"570.158.01\"\ncuda_driver_version = \"12.8\"\n\
         lib_dir = \"/usr/lib64\"\n\n[majors]\nnvidia_uvm = 510\nnvidia_caps = 511\n",
    );
    for (i, uuid) in [GPU0, GPU1].iter().enumerate() {
        profile.push_str(&format!(
            "\n[[gpus]]\nindex = {i}\nminor = {i}\nuuid = \"{uuid}\"\npci_bus_id = \"00000000:{:02x}:00.0\"\n\
             name = \"NVIDIA L20\"\narchitecture = \"ada\"\ncompute_capability = \"8.9\"\n\
             brand = \"nvidia\"\nmemory_mib = 46068\n",
            0x10 + i
        ));
    }
    std::fs::write(lib.join("gpuhook-sim-profile.toml"), profile).unwrap();
    lib
}

/// Sets a GPU's compute mode the way the mock NVML keeps it (nvmlComputeMode_t numbers).
fn set_mode(lib: &Path, uuid: &str, mode: u32) {
    std::fs::write(
        lib.join("gpuhook-sim-state")
            .join(format!("compute-mode-{uuid}")),
        format!("{mode}\n"),
    )
    .unwrap();
}

struct Node {
    mps: Mps,
    lib: PathBuf,
    registry: PathBuf,
}

impl Node {
    fn new() -> Node {
        let mps = Mps::new();
        let lib = mock_nvml(mps.dir.path());
        let registry = mps.dir.path().join("registry");
        Node { mps, lib, registry }
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("LD_LIBRARY_PATH", self.lib.display().to_string()),
            (
                "GPUHOOK_SIM_MPS_GPU_REGISTRY",
                self.registry.display().to_string(),
            ),
        ]
    }

    fn start(&self) {
        let out = self
            .mps
            .cmd()
            .envs(self.env())
            .arg("-d")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "-d failed: {out:?}");
    }

    /// A CUDA application whose first visible GPU is GPU0, on pipe directory `pipe` (`None`:
    /// the daemon's).
    fn client(&self, pipe: Option<&Path>) -> Output {
        let mut c = self.mps.cmd();
        c.envs(self.env()).env("CUDA_VISIBLE_DEVICES", GPU0).args([
            "--sim-client",
            "--uid",
            "0",
            "--hold",
            "0",
        ]);
        if let Some(p) = pipe {
            c.env("CUDA_MPS_PIPE_DIRECTORY", p);
        }
        c.output().unwrap()
    }
}

fn said(o: &Output) -> String {
    format!(
        "exit {:?}; stdout {}; stderr {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn default_mode_lets_a_client_without_daemon_run_without_mps() {
    let n = Node::new();
    let out = n.client(None);
    assert_eq!(out.status.code(), Some(4), "{}", said(&out));
}

#[test]
fn prohibited_refuses_a_client_without_daemon_and_the_mps_server_of_one_with_it() {
    let n = Node::new();
    set_mode(&n.lib, GPU0, 2);
    let alone = n.client(None);
    assert_eq!(alone.status.code(), Some(6), "{}", said(&alone));
    assert!(said(&alone).contains("PROHIBITED"), "{}", said(&alone));
    // Another GPU's mode does not matter.
    set_mode(&n.lib, GPU1, 0);
    n.start();
    let served = n.client(None);
    assert_eq!(served.status.code(), Some(5), "{}", said(&served));
    assert!(said(&served).contains("PROHIBITED"), "{}", said(&served));
    assert!(!said(&served).contains("server="), "{}", said(&served));
    // Once the GPU allows the server's context, clients are served.
    set_mode(&n.lib, GPU0, 3);
    let ok = n.client(None);
    assert_eq!(ok.status.code(), Some(0), "{}", said(&ok));
    assert!(said(&ok).contains("server="), "{}", said(&ok));
    n.mps.ctl("quit");
}

#[test]
fn exclusive_process_refuses_a_second_context_while_an_mps_server_holds_one() {
    let n = Node::new();
    set_mode(&n.lib, GPU0, 3);
    n.start();
    // A client that stays attached keeps its MPS server (and its context) alive.
    let held = n.mps.client(
        0,
        &[
            ("LD_LIBRARY_PATH", n.lib.to_str().unwrap()),
            ("GPUHOOK_SIM_MPS_GPU_REGISTRY", n.registry.to_str().unwrap()),
            ("CUDA_VISIBLE_DEVICES", GPU0),
        ],
    );
    held.attached();
    let elsewhere = n.mps.dir.path().join("no-daemon");
    let out = n.client(Some(&elsewhere));
    assert_eq!(out.status.code(), Some(6), "{}", said(&out));
    assert!(said(&out).contains("EXCLUSIVE_PROCESS"), "{}", said(&out));
    n.mps.ctl("quit");
    drop(held);
    // The server is gone with its daemon: the GPU's one context is free again.
    let start = std::time::Instant::now();
    loop {
        let out = n.client(Some(&elsewhere));
        if out.status.code() == Some(4) {
            break;
        }
        assert!(start.elapsed() < PATIENCE, "{}", said(&out));
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
