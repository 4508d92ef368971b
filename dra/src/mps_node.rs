//! What a claim daemon changes on the node besides its process, and undoes when it stops:
//!
//! - **compute mode**: each of its GPUs is switched to EXCLUSIVE_PROCESS while the daemon runs
//!   (NVIDIA's MPS guide; gpu-mps-daemon's supervisor and NVIDIA's DRA driver, `sharing.go`
//!   `MpsControlDaemon.Start`, do the same), so only the MPS server can hold a context on it.
//!   The mode each GPU had is recorded in `<daemon dir>/compute-mode.json` **before** the daemon
//!   starts and restored when it stops (also by a later run of the plugin, from the record).
//!   A record that exists is never overwritten: the first mode seen is the one restored.
//!   Through the one NVML layer (`gpu_mps_daemon::node::NvmlComputeMode` over
//!   `gpuhook_node::nvml`). As gpu-mps-daemon, a GPU whose mode cannot be set is logged and the
//!   daemon still runs (NVIDIA fails the claim).
//! - **ready marker**: `<daemon dir>/ready` (mode 0644), written only after the daemon's limits
//!   were read back, removed first when it stops. It names the pipe dir (`pipeDirectory`), which
//!   is what `gpuhook hook setup --mps-share NAME::PIPE_DIR` (`gpuhook_request::check_mps_access`)
//!   reads at container start: a container of a claim whose daemon is not ready is refused.
//! - **supervision** (`mps_supervise.rs`): a daemon that dies loses its marker first, its GPUs
//!   are PROHIBITED until a replacement's limits are read back, then EXCLUSIVE_PROCESS again.
//! - **`/dev/shm`**: `<daemon dir>/shm` (mode 1777, like `/dev/shm`), the daemon's `/dev/shm`
//!   in its private mount namespace and bind-mounted at `/dev/shm` in the claim's containers
//!   (NVIDIA's `GetCDIContainerEdits`): MPS clients and their server share memory there, and
//!   the claims of other daemons do not see it. Removed with the daemon dir.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use gpu_mps_daemon::inventory::{ComputeMode, ComputeModeSetter, NoComputeMode};
use gpu_mps_daemon::layout::GpuLayout;

/// Largest compute-mode record or ready marker read.
const MAX_RECORD: u64 = 64 << 10;

/// A setter that sets nothing (tests and nodes without NVML): every call is logged as refused.
pub fn no_compute_mode(reason: &str) -> Arc<dyn ComputeModeSetter> {
    Arc::new(NoComputeMode {
        reason: reason.to_string(),
    })
}

/// `<daemon dir>/compute-mode.json`: the mode each GPU had before the daemon.
pub fn record_path(dir: &Path) -> PathBuf {
    dir.join("compute-mode.json")
}

fn mode_name(m: ComputeMode) -> &'static str {
    match m {
        ComputeMode::Default => "Default",
        ComputeMode::ExclusiveThread => "ExclusiveThread",
        ComputeMode::Prohibited => "Prohibited",
        ComputeMode::ExclusiveProcess => "ExclusiveProcess",
    }
}

fn mode_of(name: &str) -> Option<ComputeMode> {
    [
        ComputeMode::Default,
        ComputeMode::ExclusiveThread,
        ComputeMode::Prohibited,
        ComputeMode::ExclusiveProcess,
    ]
    .into_iter()
    .find(|m| mode_name(*m) == name)
}

fn read_record(dir: &Path) -> BTreeMap<String, String> {
    gpuhook_node::bounded::read_bounded(&record_path(dir), MAX_RECORD)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

/// Switches `uuids` to EXCLUSIVE_PROCESS, recording each GPU's previous mode first (an existing
/// entry is kept). A GPU that refuses is logged and left as it is.
pub fn set_exclusive(compute: &dyn ComputeModeSetter, dir: &Path, uuids: &[String]) {
    let mut rec = read_record(dir);
    for uuid in uuids {
        match compute.set_compute_mode(uuid, ComputeMode::ExclusiveProcess) {
            Ok(prev) => {
                rec.entry(uuid.clone())
                    .or_insert_with(|| mode_name(prev).to_string());
                let bytes = serde_json::to_vec(&rec).unwrap_or_default();
                if let Err(e) = gpuhook_fs::write_atomic(&record_path(dir), &bytes, 0o600) {
                    tracing::warn!(gpu = %uuid, error = %e, "compute mode record not written; the mode will not be restored");
                }
            }
            Err(e) => tracing::warn!(gpu = %uuid, error = %e,
                "compute mode not set to EXCLUSIVE_PROCESS; other processes may use the GPU outside MPS"),
        }
    }
}

/// Restores the modes recorded in `dir` and removes the record. Every recorded mode is set
/// again, EXCLUSIVE_PROCESS too: the GPU may be PROHIBITED by a restart window
/// (`mps_supervise.rs`). The record is written before the claim's daemon first starts (before
/// any fence), so a recorded mode is the admin's.
pub fn restore(compute: &dyn ComputeModeSetter, dir: &Path) {
    for (uuid, name) in read_record(dir) {
        let Some(prev) = mode_of(&name) else {
            continue;
        };
        if let Err(e) = compute.set_compute_mode(&uuid, prev) {
            tracing::warn!(gpu = %uuid, mode = name, error = %e, "cannot restore the compute mode");
        }
    }
    if let Err(e) = std::fs::remove_file(record_path(dir)) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(dir = %dir.display(), error = %e, "compute mode record left behind");
        }
    }
}

/// Writes the ready marker of the daemon at `layout` (after its limits were read back).
pub fn write_ready(
    layout: &GpuLayout,
    pid: i32,
    uuids: &[String],
    threads: u32,
    pinned_mib: &[Option<u64>],
) -> Result<(), String> {
    let ready = serde_json::json!({
        "uuid": uuids.join(","),
        "pid": pid,
        "activeThreadPercentage": threads,
        "pinnedMemoryLimitMiB": pinned_mib,
        "pipeDirectory": layout.pipe,
    });
    gpuhook_fs::write_atomic(&layout.ready, ready.to_string().as_bytes(), 0o644)
        .map_err(|e| format!("{}: {e}", layout.ready.display()))
}

/// The identity record of the daemon at `layout`, if any.
pub fn recorded(layout: &GpuLayout) -> Option<gpu_mps_daemon::process::Identity> {
    let path = gpu_mps_daemon::daemon_proc::record_path(layout);
    gpuhook_node::bounded::read_bounded(&path, MAX_RECORD)
        .ok()
        .and_then(|b| gpu_mps_daemon::process::Identity::parse_record(&String::from_utf8_lossy(&b)))
}

/// The pid in the identity record of the daemon at `layout` (0 when there is none).
pub fn recorded_pid(layout: &GpuLayout) -> i32 {
    recorded(layout).map_or(0, |id| id.pid)
}

/// Whether `id` still runs (not a zombie: our own child is reaped only when stopped).
pub fn alive(id: gpu_mps_daemon::process::Identity) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{}/stat", id.pid)) else {
        return false;
    };
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, r)| r.split_whitespace().next());
    state != Some("Z") && gpu_mps_daemon::process::Identity::of(id.pid) == Some(id)
}

/// Removes the ready marker of `layout`, first thing when its daemon stops.
pub fn remove_ready(layout: &GpuLayout) {
    if let Err(e) = std::fs::remove_file(&layout.ready) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(file = %layout.ready.display(), error = %e, "ready marker left behind");
        }
    }
}

#[cfg(test)]
#[path = "mps_node_tests.rs"]
mod tests;
