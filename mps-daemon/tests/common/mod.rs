//! Support for the gpu-mps-daemon integration tests: a fake node (inventory JSON + a driver root
//! whose `usr/bin/nvidia-cuda-mps-control` is the simulator), running the built daemon, and
//! talking to the simulated control daemons the way a CUDA client would.
// Test support: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use gpuhook_node::{
    DeviceMajors, DiscoverySource, DriverFiles, Gpu, Inventory, INVENTORY_FORMAT_VERSION,
};
use serde_json::Value;

/// Generous bound for anything we wait for (the machine is small and shared).
pub const WAIT: Duration = Duration::from_secs(30);

mod util;
pub use util::*;
pub mod sim_node;

pub fn daemon_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_gpu-mps-daemon"))
}

/// The simulator: `GPUHOOK_SIM_MPS_CONTROL`, else next to our binary (workspace build).
pub fn sim_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("GPUHOOK_SIM_MPS_CONTROL") {
        return PathBuf::from(p);
    }
    let p = daemon_bin().with_file_name("sim-nvidia-cuda-mps-control");
    assert!(
        p.exists(),
        "{} is missing: build the workspace first (`cargo build --workspace`) or set GPUHOOK_SIM_MPS_CONTROL",
        p.display()
    );
    p
}

pub fn uuid(i: u32) -> String {
    format!("GPU-{i:08x}-1111-2222-3333-444455556666")
}

/// A node with `n` GPUs of `mem_mib` each.
pub struct Node {
    pub dir: tempfile::TempDir,
    pub driver_root: PathBuf,
    pub inventory: PathBuf,
    pub mps_root: PathBuf,
    pub config: PathBuf,
    /// `mpsDaemon.cdiSpecDir` of [`Node::write_config`].
    pub cdi_dir: PathBuf,
}

impl Node {
    pub fn new(n: u32, mem_mib: u64) -> Node {
        let dir = tempfile::tempdir().unwrap();
        let driver_root = dir.path().join("driver");
        std::fs::create_dir_all(driver_root.join("usr/bin")).unwrap();
        std::os::unix::fs::symlink(
            sim_bin(),
            driver_root.join("usr/bin/nvidia-cuda-mps-control"),
        )
        .unwrap();
        let gpus = (0..n)
            .map(|i| Gpu {
                index: i,
                minor: i,
                uuid: uuid(i),
                pci_bus_id: format!("00000000:{:02x}:00.0", 0x10 + i),
                name: "NVIDIA H100 80GB HBM3".into(),
                memory_mib: mem_mib,
                architecture: Some("hopper".into()),
                compute_capability: Some((9, 0)),
                brand: Some("nvidia".into()),
                mig_enabled: false,
                mig_devices: vec![],
            })
            .collect();
        let inv = Inventory {
            format_version: INVENTORY_FORMAT_VERSION,
            driver_root: driver_root.clone(),
            dev_root: driver_root.clone(),
            driver_version: "570.158.01".into(),
            cuda_driver_version: Some("12.8".into()),
            majors: DeviceMajors {
                nvidia: 195,
                nvidia_uvm: Some(510),
                nvidia_caps: None,
                nvidia_caps_imex_channels: None,
            },
            gpus,
            mig_caps: None,
            files: DriverFiles::default(),
            source: DiscoverySource::Nvml,
        };
        let inventory = dir.path().join("inventory.json");
        std::fs::write(&inventory, serde_json::to_vec(&inv).unwrap()).unwrap();
        let mps_root = dir.path().join("mps");
        let config = dir.path().join("config.yaml");
        let cdi_dir = dir.path().join("cdi");
        Node {
            dir,
            driver_root,
            inventory,
            mps_root,
            config,
            cdi_dir,
        }
    }

    /// Replaces the driver root's control binary with a shell script that runs `body` and then
    /// execs the simulator (`$SIM`).
    pub fn wrap_control(&self, body: &str) {
        let bin = self.driver_root.join("usr/bin/nvidia-cuda-mps-control");
        std::fs::remove_file(&bin).unwrap();
        let script = format!(
            "#!/bin/sh\nSIM='{}'\n{body}\nexec \"$SIM\" \"$@\"\n",
            sim_bin().display()
        );
        gpuhook_fs::testing::write_executable(&bin, &script).unwrap();
    }

    /// Writes a config: `resources` is the YAML list body, `extra` more `mpsDaemon` keys.
    pub fn write_config(&self, resources: &str, extra: &str) {
        let text = format!(
            "version: v1\nsharing:\n  mps:\n    resources:\n{resources}mpsDaemon:\n  mpsRoot: {}\n  driverRoot: {}\n  cdiSpecDir: {}\n{extra}",
            self.mps_root.display(),
            self.driver_root.display(),
            self.cdi_dir.display()
        );
        std::fs::write(&self.config, text).unwrap();
    }

    pub fn command(&self) -> Command {
        let mut c = Command::new(daemon_bin());
        c.arg("--config")
            .arg(&self.config)
            .arg("--inventory-json")
            .arg(&self.inventory)
            .env("RUST_LOG", "debug")
            .env("GPUHOOK_TEST_MARKER", "must-not-leak");
        c
    }

    /// Starts the daemon with `--listen` on a free port.
    pub fn start(&self) -> Daemon {
        self.start_with(|_| {})
    }

    /// [`Node::start`] with a change to the command first (limits, environment).
    pub fn start_with(&self, f: impl FnOnce(&mut Command)) -> Daemon {
        let port = free_port();
        let log = self.dir.path().join(format!("daemon-{port}.log"));
        let mut cmd = self.command();
        f(&mut cmd);
        let child = cmd
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Daemon { child, port, log }
    }

    pub fn pipe(&self, i: u32) -> PathBuf {
        self.mps_root.join(uuid(i)).join("pipe")
    }

    pub fn ready_file(&self, i: u32) -> PathBuf {
        self.mps_root.join(uuid(i)).join("ready")
    }

    pub fn status(&self) -> Option<Value> {
        let text = std::fs::read_to_string(self.mps_root.join("status.json")).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// Status entry of GPU `i`.
    pub fn gpu_status(&self, i: u32) -> Option<Value> {
        let s = self.status()?;
        s["gpus"]
            .as_array()?
            .iter()
            .find(|g| g["uuid"] == uuid(i))
            .cloned()
    }

    pub fn wait_ready(&self, i: u32) -> Value {
        wait_for(&format!("GPU {i} ready"), || {
            self.gpu_status(i)
                .filter(|g| g["state"] == "ready" && self.ready_file(i).exists())
        })
    }

    /// Sends one command to GPU `i`'s control daemon like a client would.
    pub fn control(&self, i: u32, cmd: &str) -> Output {
        control_at(&self.pipe(i), cmd)
    }

    /// A simulated CUDA client of GPU `i`: prints the limits it got.
    pub fn client_limits(&self, i: u32) -> String {
        let out = self
            .sim_command(i)
            .args(["--sim-client", "--uid", "0", "--hold", "0"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).to_string()
    }

    fn sim_command(&self, i: u32) -> Command {
        let mut c = Command::new(sim_bin());
        c.env_clear()
            .env("CUDA_MPS_PIPE_DIRECTORY", self.pipe(i))
            .env(
                "CUDA_MPS_LOG_DIRECTORY",
                self.mps_root.join(uuid(i)).join("log"),
            );
        c
    }
}

/// Sends one command to the control daemon of pipe directory `pipe`.
pub fn control_at(pipe: &Path, cmd: &str) -> Output {
    use std::io::Write;
    let mut child = Command::new(sim_bin())
        .env_clear()
        .env("CUDA_MPS_PIPE_DIRECTORY", pipe)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("{cmd}\n").as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

pub struct Daemon {
    pub child: Child,
    pub port: u16,
    pub log: PathBuf,
}

impl Daemon {
    pub fn pid(&self) -> i32 {
        i32::try_from(self.child.id()).expect("a pid fits in i32")
    }

    pub fn signal(&self, sig: libc::c_int) {
        // SAFETY: kill(2) on our own child's pid.
        assert_eq!(unsafe { libc::kill(self.pid(), sig) }, 0);
    }

    /// Waits for exit (bounded); returns the exit code.
    pub fn wait_exit(&mut self) -> Option<i32> {
        let start = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st.code();
            }
            assert!(
                start.elapsed() < WAIT,
                "daemon did not exit; log:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn get(&self, path: &str) -> (u16, String) {
        http_get(self.port, path)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            // SAFETY: SIGTERM to our own child; it cleans up its control daemons.
            unsafe { libc::kill(self.pid(), libc::SIGTERM) };
            let start = Instant::now();
            while self.child.try_wait().ok().flatten().is_none() && start.elapsed() < WAIT {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Path of the daemon's CDI spec in [`Node::cdi_dir`].
impl Node {
    pub fn cdi_spec(&self) -> PathBuf {
        self.cdi_dir.join("nvidia.com-gpu-mps.json")
    }
}
