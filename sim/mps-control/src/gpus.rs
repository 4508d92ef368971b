//! The driver's rule that one MPS control daemon serves a GPU for a user: a second control
//! daemon whose `CUDA_VISIBLE_DEVICES` names a GPU another live daemon of the same user already
//! serves fails to start (NVIDIA's MPS: one MPS server per GPU per user; a client reaches one
//! control daemon, so a GPU's MPS clients must share it).
//!
//! The real driver keeps this state in the kernel; the simulator keeps it in a directory the
//! caller names with `GPUHOOK_SIM_MPS_GPU_REGISTRY` (one simulated node = one directory; unset:
//! the rule is not simulated, as before): one `flock`ed file `<uid>-<gpu>.lock` per (user, GPU),
//! held for the daemon's lifetime and released by the kernel when it exits or crashes.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;

use anyhow::{anyhow, Context, Result};

/// The environment variable naming the simulated node's registry directory.
pub const REGISTRY_ENV: &str = "GPUHOOK_SIM_MPS_GPU_REGISTRY";

/// The GPUs a daemon serves: its `CUDA_VISIBLE_DEVICES` entries, or `all`.
fn gpus_of(visible: Option<&str>) -> Vec<String> {
    let list: Vec<String> = visible
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.replace(['/', '\0'], "_"))
        .collect();
    if list.is_empty() {
        vec!["all".to_string()]
    } else {
        list
    }
}

/// Takes the (user, GPU) locks of this daemon; the files must be kept open while it runs.
pub fn claim(registry: Option<&Path>, uid: u32, visible: Option<&str>) -> Result<Vec<File>> {
    let Some(dir) = registry else {
        return Ok(Vec::new());
    };
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let gpus = gpus_of(visible);
    let every = gpus.iter().any(|g| g == "all");
    let mut held = Vec::new();
    let all = (!every).then(|| "all".to_string());
    for gpu in gpus.iter().chain(all.iter()) {
        let path = dir.join(format!("{uid}-{gpu}.lock"));
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        // A daemon of every GPU (`all`) holds the `all` lock exclusively; one of named GPUs
        // shares it, so that `all` and a named GPU exclude each other.
        let mode = if gpu == "all" && !every {
            libc::LOCK_SH
        } else {
            libc::LOCK_EX
        };
        // SAFETY: flock on a valid, owned file descriptor; no memory is involved.
        let rc = unsafe { libc::flock(f.as_raw_fd(), mode | libc::LOCK_NB) };
        if rc != 0 {
            return Err(anyhow!(
                "An MPS control daemon of user {uid} already serves GPU {gpu}: one control daemon per GPU and user"
            ));
        }
        held.push(f);
    }
    Ok(held)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_second_daemon_of_one_gpu_and_user_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let reg = Some(dir.path());
        let first = claim(reg, 0, Some("GPU-a")).unwrap();
        let err = claim(reg, 0, Some("GPU-b,GPU-a")).unwrap_err();
        assert!(err.to_string().contains("GPU-a"), "{err}");
        assert!(claim(reg, 0, None).is_err(), "all GPUs overlap GPU-a");
        let _other_gpu = claim(reg, 0, Some("GPU-b")).unwrap();
        let _other_user = claim(reg, 1000, Some("GPU-a")).unwrap();
        drop(first);
        assert!(claim(reg, 0, Some("GPU-a")).is_ok(), "released at exit");
        assert!(claim(None, 0, Some("GPU-a")).unwrap().is_empty());
    }
}
