//! The client limits of a GPU's default MPS share, as gpu-mps-daemon publishes them, for
//! Allocate under the envvar and volume-mounts strategies.
//!
//! Under a CDI strategy the container gets gpu-mps-daemon's `nvidia.com/gpu-mps=<uuid>` device,
//! whose env carries the share's limits (`CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`,
//! `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`). Under envvar the plugin itself mounts the pipe directory
//! and `/dev/shm`; without these two variables a client would run with the server's limits only,
//! which are the largest of the GPU's shares when `mpsDaemon.shares` are configured. So the
//! plugin copies them from the same device of the daemon's spec: `<mpsRoot>/status.json` names
//! the spec (`cdi.specPath`), the spec's device `<uuid>` holds the env.
//!
//! Both files are written by gpu-mps-daemon (root) outside the directories containers get
//! (`pipe/`, `shm/`); each read is bounded. Only `CUDA_MPS_*` variables are taken from the spec,
//! and the pipe directory is left to the plugin's own setting.

use std::path::{Path, PathBuf};

use gpuhook_node::bounded::{
    read_bounded, BoundedReadError, MAX_CDI_SPEC_BYTES, MAX_CONFIG_FILE_BYTES,
};
use serde_json::Value;

/// The variable the plugin sets itself (its own `containerPipeDirectory`).
const PIPE_VAR: &str = "CUDA_MPS_PIPE_DIRECTORY";

/// Why a share's limits could not be read.
#[derive(Debug, thiserror::Error)]
pub enum MpsShareError {
    #[error("cannot read gpu-mps-daemon's status or CDI spec")]
    Read(#[source] BoundedReadError),
    #[error("{} is not JSON", path.display())]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error(
        "{} names no CDI spec (cdi.specPath): gpu-mps-daemon has not published its spec yet",
        path.display()
    )]
    NoSpec { path: PathBuf },
    #[error(
        "gpu-mps-daemon's spec {} has no device {uuid} yet (its daemon is not ready)",
        path.display()
    )]
    NoDevice { path: PathBuf, uuid: String },
}

/// gpu-mps-daemon's status file in its root; it names the daemon's CDI spec.
pub const STATUS_FILE: &str = "status.json";

/// The CDI spec `<mps_root>/status.json` names.
fn named_spec(mps_root: &Path) -> Result<PathBuf, MpsShareError> {
    let status_path = mps_root.join(STATUS_FILE);
    let status = read_json(&status_path, MAX_CONFIG_FILE_BYTES)?;
    status
        .pointer("/cdi/specPath")
        .and_then(Value::as_str)
        .map(PathBuf::from)
        .ok_or(MpsShareError::NoSpec { path: status_path })
}

/// The daemon's CDI spec path, when its status can be read (for the config watcher).
pub fn spec_path(mps_root: &Path) -> Option<PathBuf> {
    named_spec(mps_root).ok()
}

fn read_json(path: &Path, limit: u64) -> Result<Value, MpsShareError> {
    let bytes = read_bounded(path, limit).map_err(MpsShareError::Read)?;
    serde_json::from_slice(&bytes).map_err(|source| MpsShareError::Json {
        path: path.to_path_buf(),
        source,
    })
}

/// `(name, value)` of each `CUDA_MPS_*` variable (but the pipe directory) of the default share
/// of GPU `uuid`, from the spec that `<mps_root>/status.json` names.
pub fn share_env(mps_root: &Path, uuid: &str) -> Result<Vec<(String, String)>, MpsShareError> {
    let spec_path = named_spec(mps_root)?;
    let spec = read_json(&spec_path, MAX_CDI_SPEC_BYTES)?;
    let device = spec
        .get("devices")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|d| d.get("name").and_then(Value::as_str) == Some(uuid))
        .ok_or_else(|| MpsShareError::NoDevice {
            path: spec_path.clone(),
            uuid: uuid.to_string(),
        })?;
    let env = device
        .pointer("/containerEdits/env")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter_map(|e| e.split_once('='))
        .filter(|(k, _)| k.starts_with("CUDA_MPS_") && *k != PIPE_VAR)
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Ok(env)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn write(dir: &Path, spec: &Value) {
        let spec_path = dir.join("nvidia.com-gpu-mps.json");
        std::fs::write(&spec_path, spec.to_string()).unwrap();
        let status = json!({"cdi": {"specPath": spec_path, "devices": []}});
        std::fs::write(dir.join("status.json"), status.to_string()).unwrap();
    }

    #[test]
    fn default_share_limits_come_from_the_uuid_device() {
        let dir = tempfile::tempdir().unwrap();
        let env = |pct: u32| {
            json!([
                "NVIDIA_VISIBLE_DEVICES=void",
                "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps",
                format!("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={pct}"),
                "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=1024M"
            ])
        };
        let spec = json!({"kind": "nvidia.com/gpu-mps", "devices": [
            {"name": "0", "containerEdits": {"env": env(25)}},
            {"name": "GPU-a-half", "containerEdits": {"env": env(50)}},
            {"name": "GPU-a", "containerEdits": {"env": env(25)}},
        ]});
        write(dir.path(), &spec);
        let got = share_env(dir.path(), "GPU-a").unwrap();
        assert_eq!(
            got,
            [
                ("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE".into(), "25".into()),
                ("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT".into(), "0=1024M".into()),
            ]
        );
        let err = share_env(dir.path(), "GPU-b").unwrap_err();
        assert!(matches!(err, MpsShareError::NoDevice { .. }), "{err}");
    }

    #[test]
    fn no_status_or_no_spec_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = share_env(dir.path(), "GPU-a").unwrap_err();
        assert!(matches!(err, MpsShareError::Read(_)), "{err}");
        std::fs::write(
            dir.path().join("status.json"),
            r#"{"cdi": {"devices": []}}"#,
        )
        .unwrap();
        let err = share_env(dir.path(), "GPU-a").unwrap_err();
        assert!(matches!(err, MpsShareError::NoSpec { .. }), "{err}");
    }
}
