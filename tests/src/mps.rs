//! Running `gpu-mps-daemon` from an end-to-end test.
//!
//! Several tests start the real daemon on a simulated node and wait until it has published a GPU
//! and its CDI spec. The daemon owns child processes (one simulated control daemon per GPU) and
//! mounts, so it must get SIGTERM to clean up even when an assertion fails: [`Daemon`] sends it on
//! drop and only falls back to SIGKILL after a bounded wait, so no process outlives the test.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::built;

/// How long a test waits for the daemon (to become ready, to stop) before failing.
pub const WAIT: Duration = Duration::from_secs(60);

/// Polls `f` every 20 ms until it returns `Some`, panicking after [`WAIT`] with `what`.
pub fn wait_for<T>(what: &str, f: impl FnMut() -> Option<T>) -> T {
    wait_for_or(|| format!("timed out waiting for {what}"), f)
}

/// [`wait_for`], with the panic message built by `message` when it times out.
fn wait_for_or<T>(message: impl FnOnce() -> String, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(start.elapsed() < WAIT, "{}", message());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The daemon's `status.json` under its MPS root, if it is there and parses.
pub fn status_json(mps: &Path) -> Option<Value> {
    serde_json::from_slice(&std::fs::read(mps.join("status.json")).ok()?).ok()
}

/// Writes a daemon config at `path`: every GPU shared 4 ways by MPS, with its MPS root, the
/// node's driver root, the CDI spec directory, this workspace's `gpuhook`, a 16 MiB `/dev/shm`
/// and a 300 ms probe interval. `extra` is appended to the `mpsDaemon` section (indented lines).
pub fn write_config(path: &Path, mps: &Path, driver_root: &Path, cdi: &Path, extra: &str) {
    std::fs::write(
        path,
        format!(
            "version: v1\nsharing:\n  mps:\n    resources:\n      - {{name: nvidia.com/gpu, replicas: 4, devices: all}}\nmpsDaemon:\n  mpsRoot: {}\n  driverRoot: {}\n  cdiSpecDir: {}\n  gpuhookPath: {}\n  shmSize: 16Mi\n  probeInterval: 300ms\n{extra}",
            mps.display(),
            driver_root.display(),
            cdi.display(),
            built("gpuhook").display()
        ),
    )
    .unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

/// A running `gpu-mps-daemon`; SIGTERM, then SIGKILL after [`WAIT`], on drop.
#[derive(Debug)]
pub struct Daemon {
    child: Child,
    log: PathBuf,
}

impl Daemon {
    /// Starts the built daemon with `--config config` (and `--cdi-spec-dir` when given), its
    /// stderr going to `log`.
    pub fn start(config: &Path, cdi_spec_dir: Option<&Path>, log: &Path) -> Self {
        let stderr =
            std::fs::File::create(log).unwrap_or_else(|e| panic!("create {}: {e}", log.display()));
        let mut cmd = Command::new(built("gpu-mps-daemon"));
        cmd.arg("--config").arg(config);
        if let Some(dir) = cdi_spec_dir {
            cmd.arg("--cdi-spec-dir").arg(dir);
        }
        let child = cmd
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("spawn gpu-mps-daemon");
        Daemon {
            child,
            log: log.to_path_buf(),
        }
    }

    /// What the daemon has logged so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until `status.json` under `mps` shows GPU `index` ready, `spec_file` exists and
    /// `also` accepts the status; returns that GPU's status entry. Panics with the log on timeout.
    pub fn wait_ready(
        &self,
        mps: &Path,
        spec_file: &Path,
        index: u32,
        also: impl Fn(&Value) -> bool,
    ) -> Value {
        wait_for_or(
            || format!("daemon not ready: {}", self.log_text()),
            || {
                let s = status_json(mps)?;
                let gpu = s["gpus"]
                    .as_array()?
                    .iter()
                    .find(|g| g["index"] == index && g["state"] == "ready")?
                    .clone();
                (spec_file.exists() && also(&s)).then_some(gpu)
            },
        )
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(pid) = libc::pid_t::try_from(self.child.id()) {
            // SAFETY: kill(2) of our own child, not reaped yet (it is reaped below), so the pid
            // is still ours.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        let start = Instant::now();
        while self.child.try_wait().ok().flatten().is_none() && start.elapsed() < WAIT {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
