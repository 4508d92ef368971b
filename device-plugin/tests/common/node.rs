//! The plugin binary and the node files it reads (config, inventory, mock NVML).
#![allow(dead_code)]

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use gpuhook_node::{
    DeviceMajors, DiscoverySource, DriverFiles, Gpu, Inventory, INVENTORY_FORMAT_VERSION,
};

use super::WAIT;

pub const BIN: &str = env!("CARGO_BIN_EXE_gpuhook-device-plugin");

/// The plugin process; killed if a failed test leaves it running.
pub struct Plugin(pub std::process::Child);

impl Drop for Plugin {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Starts `serve --config <config> --inventory <inventory> --plugin-dir <plugin_dir> <extra…>`;
/// its stdout is discarded (it must print nothing there), health env knobs unset.
pub fn serve(config: &Path, inventory: &Path, plugin_dir: &Path, extra: &[&OsStr]) -> Plugin {
    let child = Command::new(BIN)
        .arg("serve")
        .arg("--config")
        .arg(config)
        .arg("--inventory")
        .arg(inventory)
        .arg("--plugin-dir")
        .arg(plugin_dir)
        .args(extra)
        .stdout(Stdio::null())
        .env_remove("DP_DISABLE_HEALTHCHECKS")
        .env_remove("DP_ENABLE_HEALTHCHECKS")
        .spawn()
        .unwrap();
    Plugin(child)
}

/// SIGTERM, then the exit status (within 10 s).
pub async fn terminate(mut p: Plugin) -> ExitStatus {
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

pub fn inventory() -> Inventory {
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
pub fn node_files(dir: &Path) -> (PathBuf, PathBuf) {
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
pub fn mock_nvml(dir: &Path) -> PathBuf {
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

/// `l20` (8 replicas) and `t4` (3 replicas, renamed) as ConfigMap keys.
pub fn named_configs(dir: &Path) -> PathBuf {
    let cfgs = dir.join("configs");
    std::fs::create_dir(&cfgs).unwrap();
    let ts = |replicas: u32, rename: bool| {
        format!(
            "version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: {rename}\n    resources:\n    - name: nvidia.com/gpu\n      replicas: {replicas}\n"
        )
    };
    std::fs::write(cfgs.join("l20"), ts(8, false)).unwrap();
    std::fs::write(cfgs.join("t4"), ts(3, true)).unwrap();
    cfgs
}
