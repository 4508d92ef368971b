//! A full simulated node (`gpuhook-sim build l20-minimal`: discovery, mock NVML keeping compute
//! modes) whose control binary can be held at its start or at its commands by gate files
//! (`GPUHOOK_SIM_MPS_HOLD`, `GPUHOOK_SIM_MPS_HOLD_COMMANDS`), for the restart-window tests.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use super::*;

/// The library directory of the l20-minimal profile (its `lib_dir`).
pub const LIB: &str = "usr/lib/x86_64-linux-gnu";

pub fn ready_to_run() -> Option<PathBuf> {
    let required = std::env::var("GPUHOOK_REQUIRE_E2E").is_ok_and(|v| v == "1");
    let tool = std::env::var_os("GPUHOOK_SIM_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| daemon_bin().with_file_name("gpuhook-sim"));
    let why = if !nix::unistd::geteuid().is_root() {
        "needs root"
    } else if !tool.exists() {
        "gpuhook-sim is not built (cargo build -p gpuhook-sim --bins -p gpuhook-mock-nvml)"
    } else {
        return Some(tool);
    };
    assert!(!required, "crash-fence test cannot run: {why}");
    eprintln!("SKIP crash-fence test: {why}");
    None
}

pub struct Sim {
    pub dir: tempfile::TempDir,
    pub root: PathBuf,
    pub mps: PathBuf,
    /// Holds the control daemon's start while it exists.
    pub gate: PathBuf,
    /// Holds client-mode commands (the limits being set and read back) while it exists.
    pub commands_gate: PathBuf,
}

impl Sim {
    /// An l20-minimal node whose control binary holds its start while `gate` exists, and its
    /// commands while `commands_gate` exists; `extra`: more lines for the wrapper script.
    pub fn build(tool: &Path, extra: &str) -> Sim {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("node");
        let out = Command::new(tool)
            .args(["build", "l20-minimal"])
            .arg(&root)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let (bin, real) = (
            root.join("usr/bin/nvidia-cuda-mps-control"),
            root.join("usr/bin/sim-nvidia-cuda-mps-control"),
        );
        std::fs::rename(&bin, &real).unwrap();
        let (gate, commands_gate) = (dir.path().join("hold"), dir.path().join("hold-commands"));
        let script = format!(
            "#!/bin/sh\nexport GPUHOOK_SIM_MPS_HOLD='{}'\nexport GPUHOOK_SIM_MPS_HOLD_COMMANDS='{}'\n{extra}\nexec '{}' \"$@\"\n",
            gate.display(),
            commands_gate.display(),
            real.display()
        );
        gpuhook_fs::testing::write_executable(&bin, &script).unwrap();
        let mps = dir.path().join("mps");
        std::fs::write(
            dir.path().join("config.yaml"),
            format!(
                "version: v1\nsharing:\n  mps:\n    resources:\n      - {{name: nvidia.com/gpu, replicas: 2, devices: all}}\nmpsDaemon:\n  mpsRoot: {}\n  driverRoot: {}\n  probeInterval: 1h\n  maxRestartBackoff: 100ms\n  cdiSpecDir: {}\n",
                mps.display(),
                root.display(),
                dir.path().join("cdi").display()
            ),
        )
        .unwrap();
        Sim {
            dir,
            root,
            mps,
            gate,
            commands_gate,
        }
    }

    pub fn start(&self) -> Daemon {
        let port = free_port();
        let log = self.dir.path().join("daemon.log");
        let child = Command::new(daemon_bin())
            .arg("--config")
            .arg(self.dir.path().join("config.yaml"))
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .env("RUST_LOG", "debug")
            .stderr(std::fs::File::create(&log).unwrap())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        Daemon { child, port, log }
    }

    pub fn gpu(&self) -> Option<serde_json::Value> {
        let text = std::fs::read(self.mps.join("status.json")).ok()?;
        let s: serde_json::Value = serde_json::from_slice(&text).ok()?;
        s["gpus"].as_array()?.first().cloned()
    }

    /// The GPU's compute mode as the node's NVML keeps it (0 DEFAULT, 2 PROHIBITED, 3
    /// EXCLUSIVE_PROCESS; nvmlComputeMode_t).
    pub fn compute_mode(&self, uuid: &str) -> String {
        let f = self
            .root
            .join(LIB)
            .join("gpuhook-sim-state")
            .join(format!("compute-mode-{uuid}"));
        std::fs::read_to_string(f)
            .map(|t| t.trim().to_string())
            .unwrap_or_else(|_| "0".into())
    }

    /// A CUDA application on the node using this GPU (as a container with the GPU's MPS share
    /// would: its pipe directory, its device; the driver's libraries from the driver root).
    pub fn client(&self, uuid: &str) -> Output {
        Command::new(self.root.join("usr/bin/sim-nvidia-cuda-mps-control"))
            .env_clear()
            .env("CUDA_MPS_PIPE_DIRECTORY", self.mps.join(uuid).join("pipe"))
            .env("CUDA_VISIBLE_DEVICES", uuid)
            .env("LD_LIBRARY_PATH", self.root.join(LIB))
            .args(["--sim-client", "--uid", "0", "--hold", "0"])
            .output()
            .unwrap()
    }

    pub fn ready(&self, not_pid: i64) -> serde_json::Value {
        wait_for("GPU ready", || {
            self.gpu().filter(|g| {
                g["state"] == "ready"
                    && g["pid"].as_i64().is_some_and(|p| p != not_pid)
                    && self
                        .mps
                        .join(g["uuid"].as_str().unwrap())
                        .join("ready")
                        .exists()
            })
        })
    }

    /// The ready GPU's UUID and its control daemon's pid.
    pub fn ready_gpu(&self) -> (String, i64) {
        let g = self.ready(0);
        (
            g["uuid"].as_str().unwrap().to_string(),
            g["pid"].as_i64().unwrap(),
        )
    }

    /// Closes `gate` (the replacement's start or its limit commands), kills control daemon
    /// `pid` and waits until the replacement waits at the gate (`what`).
    pub fn crash_held_at(&self, gate: &Path, pid: i64, what: &str) {
        std::fs::write(gate, "").unwrap();
        // SAFETY: SIGKILL to the simulated control daemon the test's daemon started.
        unsafe { libc::kill(i32::try_from(pid).unwrap(), libc::SIGKILL) };
        wait_for(what, || waiting(gate).exists().then_some(()));
    }
}

pub fn waiting(gate: &Path) -> PathBuf {
    let mut w = gate.as_os_str().to_owned();
    w.push(".waiting");
    PathBuf::from(w)
}

pub fn text(o: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The UUID of the node's only GPU, from the profile the simulated node was built from.
pub fn only_uuid(sim: &Sim) -> String {
    let profile =
        std::fs::read_to_string(sim.root.join(LIB).join("gpuhook-sim-profile.toml")).unwrap();
    let line = profile
        .lines()
        .find(|l| l.trim_start().starts_with("uuid = \"GPU-"))
        .unwrap();
    line.split('"').nth(1).unwrap().to_string()
}
