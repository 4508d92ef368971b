//! Helpers of the health tests: the published devices, a fault raised through the mock NVML's
//! event file, and the kubelet's health stream read until a device reaches a state.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use gpuhook_dra::api;
use serde_json::Value;

use super::apiserver::ApiServer;

/// Generous: the machine may be loaded.
pub const SETTLE: Duration = Duration::from_secs(60);

/// Every device of the published slices.
pub fn devices(api: &ApiServer) -> Vec<Value> {
    api.slices()
        .iter()
        .filter_map(|s| s["spec"]["devices"].as_array())
        .flatten()
        .cloned()
        .collect()
}

/// Appends a fault line to the mock NVML's event file of the node at `root`.
pub fn inject(root: &Path, line: &str) {
    let loc = gpuhook_node::NvmlLocation::locate(root, None).unwrap();
    let state: PathBuf = loc.path().parent().unwrap().join("gpuhook-sim-state");
    std::fs::create_dir_all(&state).unwrap();
    let path = state.join("events");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    writeln!(f, "{line}").unwrap();
}

/// The health stream's answer for `device`, read until `want` (Healthy/Unhealthy) comes.
pub async fn stream_says(
    stream: &mut tonic::Streaming<api::NodeWatchResourcesResponse>,
    device: &str,
    want: api::HealthStatus,
) -> String {
    tokio::time::timeout(SETTLE, async {
        loop {
            let r = stream.message().await.unwrap().unwrap();
            let found = r
                .devices
                .iter()
                .find(|d| d.device.as_ref().unwrap().device_name == device);
            if let Some(d) = found.filter(|d| d.health == want as i32) {
                return d.message.clone();
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{device} never {want:?} on the health stream"))
}
