//! Time-slice intervals of full GPUs, as NVIDIA's driver sets them (dra-facts §5, `sharing.go`):
//! `nvidia-smi -i <uuid> -c DEFAULT`, then `nvidia-smi compute-policy -i <uuid>
//! --set-timeslice <0..3>` (Default=0, Short=1, Medium=2, Long=3).
//!
//! NVML has no public call for the compute time-slice (its scheduler calls,
//! `nvmlDeviceSetVgpuSchedulerState`, are for vGPU hosts), so this runs the driver root's
//! `nvidia-smi` with a timeout, an empty environment and a fixed argv. A refusal (non-zero
//! exit) is that claim's error. The seam [`TimeSlicer`] lets tests refuse an interval.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::config::Interval;

/// Sets a GPU's time-slice interval.
pub trait TimeSlicer: Send + Sync + std::fmt::Debug {
    /// Sets `interval` on GPU `uuid`; the error is the GPU's (or tool's) message.
    fn set(&self, uuid: &str, interval: Interval) -> Result<(), String>;
}

/// `nvidia-smi` of the driver root.
#[derive(Debug, Clone)]
pub struct NvidiaSmi {
    pub binary: PathBuf,
    pub timeout: Duration,
}

fn run(binary: &PathBuf, args: &[&str], timeout: Duration) -> Result<(), String> {
    let mut child = Command::new(binary)
        .args(args)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", binary.display()))?;
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(st)) if st.success() => return Ok(()),
            Ok(Some(st)) => {
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    use std::io::Read;
                    let _ = (&mut e).take(4096).read_to_string(&mut err);
                }
                return Err(format!(
                    "`{} {}` failed ({st}): {}",
                    binary.display(),
                    args.join(" "),
                    err.trim()
                ));
            }
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("`{}` timed out after {timeout:?}", args.join(" ")));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => return Err(e.to_string()),
        }
    }
}

impl TimeSlicer for NvidiaSmi {
    fn set(&self, uuid: &str, interval: Interval) -> Result<(), String> {
        run(&self.binary, &["-i", uuid, "-c", "DEFAULT"], self.timeout)?;
        let n = (interval as u32).to_string();
        run(
            &self.binary,
            &["compute-policy", "-i", uuid, "--set-timeslice", &n],
            self.timeout,
        )
    }
}
