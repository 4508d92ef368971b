//! The binary as a DaemonSet runs it: `serve` registers with the kubelet, follows NVML health
//! events, and on SIGTERM removes its sockets and exits 0; `dry-run` prints the advertisement
//! without a kubelet.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test crate: a panic is a test failure

mod common;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use common::{next_list, FakeKubelet, WAIT};
use gpuhook_node::{
    DeviceMajors, DiscoverySource, DriverFiles, Gpu, Inventory, INVENTORY_FORMAT_VERSION,
};

const BIN: &str = env!("CARGO_BIN_EXE_gpuhook-device-plugin");

/// The plugin process; killed if a failed test leaves it running.
struct Plugin(std::process::Child);

impl Drop for Plugin {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Starts `serve`; its stdout is discarded, health env knobs unset.
fn serve(args: &[&OsStr]) -> Plugin {
    let child = Command::new(BIN)
        .arg("serve")
        .args(args)
        .stdout(Stdio::null())
        .env_remove("DP_DISABLE_HEALTHCHECKS")
        .env_remove("DP_ENABLE_HEALTHCHECKS")
        .spawn()
        .unwrap();
    Plugin(child)
}

/// SIGTERM, then the exit status (within 10 s).
async fn terminate(mut p: Plugin) -> ExitStatus {
    let pid = p.0.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(s) = p.0.try_wait().unwrap() {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "plugin still running 10 s after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

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
fn node_files(dir: &Path) -> (PathBuf, PathBuf) {
    let cfg = dir.join("config.yaml");
    let yaml = "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n";
    std::fs::write(&cfg, yaml).unwrap();
    let inv = dir.join("inventory.json");
    std::fs::write(&inv, serde_json::to_string(&inventory()).unwrap()).unwrap();
    (cfg, inv)
}

/// The mock NVML (`target/<profile>/libgpuhook_mock_nvml.so`) copied into `dir` with a profile
/// of the two test GPUs; returns the library path. Faults are injected through
/// `<dir>/gpuhook-sim-state/events`.
fn mock_nvml(dir: &Path) -> PathBuf {
    let mock = Path::new(BIN)
        .parent()
        .unwrap()
        .join("libgpuhook_mock_nvml.so");
    assert!(
        mock.is_file(),
        "{} is missing: `cargo build -p gpuhook-mock-nvml` first",
        mock.display()
    );
    let lib = dir.join("libnvidia-ml.so.570.158.01");
    std::fs::copy(&mock, &lib).unwrap();
    let mut profile = String::from(
        "name = \"dp-health\"\ndriver_version = \"570.158.01\"\ncuda_driver_version = \"12.8\"\n\
         lib_dir = \"/usr/lib64\"\n\n[majors]\nnvidia_uvm = 510\nnvidia_caps = 511\n",
    );
    for g in &inventory().gpus {
        profile.push_str(&format!(
            "\n[[gpus]]\nindex = {}\nminor = {}\nuuid = \"{}\"\npci_bus_id = \"{}\"\n\
             name = \"NVIDIA L20\"\narchitecture = \"ada\"\ncompute_capability = \"8.9\"\n\
             brand = \"nvidia\"\nmemory_mib = 46068\n",
            g.index, g.minor, g.uuid, g.pci_bus_id
        ));
    }
    std::fs::write(dir.join("gpuhook-sim-profile.toml"), profile).unwrap();
    std::fs::create_dir_all(dir.join("gpuhook-sim-state")).unwrap();
    lib
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_registers_and_sigterm_removes_sockets_and_exits_0() {
    let files = tempfile::tempdir().unwrap();
    let (cfg, inv) = node_files(files.path());
    let dir = tempfile::tempdir().unwrap();
    let mut kubelet = FakeKubelet::start(dir.path());
    let plugin = serve(&[
        "--config".as_ref(),
        cfg.as_os_str(),
        "--inventory".as_ref(),
        inv.as_os_str(),
        "--plugin-dir".as_ref(),
        dir.path().as_os_str(),
    ]);
    let mut reg = kubelet.next_registration().await;
    let got = (
        reg.request.resource_name.as_str(),
        reg.request.endpoint.as_str(),
    );
    assert_eq!(got, ("nvidia.com/gpu", "nvidia-gpu.sock"));
    let list = next_list(&mut reg, WAIT).await;
    assert_eq!(list.devices.len(), 8, "2 GPUs x 4 replicas");
    assert!(list.devices.iter().all(|d| d.id.contains("::")));
    assert!(dir.path().join("nvidia-gpu.sock").exists());

    let status = terminate(plugin).await;
    assert_eq!(status.code(), Some(0), "exit status after SIGTERM");
    assert!(
        !dir.path().join("nvidia-gpu.sock").exists(),
        "socket left behind"
    );
    assert!(
        dir.path().join("kubelet.sock").exists(),
        "the kubelet's socket is not ours to remove"
    );
    kubelet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn critical_xid_marks_the_gpu_unhealthy_in_list_and_watch_within_a_second() {
    let files = tempfile::tempdir().unwrap();
    let (cfg, inv) = node_files(files.path());
    let lib = mock_nvml(files.path());
    let dir = tempfile::tempdir().unwrap();
    let mut kubelet = FakeKubelet::start(dir.path());
    let plugin = serve(&[
        "--config".as_ref(),
        cfg.as_os_str(),
        "--inventory".as_ref(),
        inv.as_os_str(),
        "--nvml-lib".as_ref(),
        lib.as_os_str(),
        "--plugin-dir".as_ref(),
        dir.path().as_os_str(),
    ]);
    let mut reg = kubelet.next_registration().await;
    let first = next_list(&mut reg, WAIT).await;
    assert!(
        first.devices.iter().all(|d| d.health == "Healthy"),
        "{first:?}"
    );

    // Xid 48 (double-bit ECC) is critical and not ignored by default.
    let gpu1 = inventory().gpus[1].uuid.clone();
    let events = files.path().join("gpuhook-sim-state/events");
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(events)
        .unwrap();
    std::io::Write::write_all(&mut f, format!("xid {gpu1} 48\n").as_bytes()).unwrap();
    drop(f);
    let after = next_list(&mut reg, Duration::from_secs(1)).await;
    for d in &after.devices {
        let want = if d.id.starts_with(gpu1.as_str()) {
            "Unhealthy"
        } else {
            "Healthy"
        };
        assert_eq!(d.health, want, "{}", d.id);
    }
    assert_eq!(terminate(plugin).await.code(), Some(0));
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
