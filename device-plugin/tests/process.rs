//! The binary as a DaemonSet runs it: `serve` registers with the kubelet, then SIGTERM removes
//! its sockets and exits 0; `dry-run` prints the advertisement without a kubelet.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test crate: a panic is a test failure

mod common;

use std::process::{Command, Stdio};

use common::{next_list, FakeKubelet, WAIT};
use gpuhook_node::{
    DeviceMajors, DiscoverySource, DriverFiles, Gpu, Inventory, INVENTORY_FORMAT_VERSION,
};

const BIN: &str = env!("CARGO_BIN_EXE_gpuhook-device-plugin");

fn inventory() -> Inventory {
    Inventory {
        format_version: INVENTORY_FORMAT_VERSION,
        driver_root: "/".into(),
        dev_root: "/".into(),
        driver_version: "570.158.01".into(),
        cuda_driver_version: Some("12.8".into()),
        majors: DeviceMajors {
            nvidia: 195,
            nvidia_uvm: Some(510),
            nvidia_caps: None,
            nvidia_caps_imex_channels: None,
        },
        gpus: (0..2)
            .map(|i| Gpu {
                index: i,
                minor: i,
                uuid: format!("GPU-{i:08x}-1111-2222-3333-444455556666"),
                pci_bus_id: format!("00000000:{:02x}:00.0", 0x10 + i),
                name: "NVIDIA L20".into(),
                memory_mib: 46068,
                architecture: None,
                compute_capability: None,
                brand: None,
                mig_enabled: false,
                mig_devices: vec![],
            })
            .collect(),
        mig_caps: None,
        files: DriverFiles::default(),
        source: DiscoverySource::Nvml,
    }
}

/// Config and inventory files: 2 L20s time-sliced 4 ways.
fn node_files(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let cfg = dir.join("config.yaml");
    std::fs::write(&cfg, "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n").unwrap();
    let inv = dir.join("inventory.json");
    std::fs::write(&inv, serde_json::to_string(&inventory()).unwrap()).unwrap();
    (cfg, inv)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_registers_and_sigterm_removes_sockets_and_exits_0() {
    let files = tempfile::tempdir().unwrap();
    let (cfg, inv) = node_files(files.path());
    let dir = tempfile::tempdir().unwrap();
    let mut kubelet = FakeKubelet::start(dir.path());
    let mut child = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&cfg)
        .arg("--inventory")
        .arg(&inv)
        .arg("--plugin-dir")
        .arg(dir.path())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut reg = kubelet.next_registration().await;
    assert_eq!(
        (
            reg.request.resource_name.as_str(),
            reg.request.endpoint.as_str()
        ),
        ("nvidia.com/gpu", "nvidia-gpu.sock")
    );
    let list = next_list(&mut reg, WAIT).await;
    assert_eq!(list.devices.len(), 8, "2 GPUs x 4 replicas");
    assert!(list.devices.iter().all(|d| d.id.contains("::")));
    assert!(dir.path().join("nvidia-gpu.sock").exists());

    let st = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let deadline = std::time::Instant::now() + WAIT;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "plugin still running 10 s after SIGTERM"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(status.code(), Some(0), "exit status after SIGTERM");
    assert!(
        !dir.path().join("nvidia-gpu.sock").exists(),
        "socket left behind"
    );
    assert!(
        dir.path().join("kubelet.sock").exists(),
        "the kubelet's socket is not the plugin's to remove"
    );
    kubelet.stop().await;
}

#[test]
fn dry_run_prints_the_advertisement_as_json() {
    let files = tempfile::tempdir().unwrap();
    let (cfg, inv) = node_files(files.path());
    let out = Command::new(BIN)
        .args(["dry-run", "--config"])
        .arg(&cfg)
        .arg("--inventory")
        .arg(&inv)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let text = v.to_string();
    assert!(
        text.contains("GPU-00000001-1111-2222-3333-444455556666::3"),
        "{text}"
    );
    assert!(!text.contains("::4"), "{text}");
}
