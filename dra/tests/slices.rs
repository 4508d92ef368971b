//! This node's ResourceSlices through a validating fake API server, and their update on a
//! health change together with the kubelet's resource-health stream.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "common/apiserver.rs"]
mod apiserver;
#[path = "common/kubelet.rs"]
mod kubelet;
#[path = "common/plugin.rs"]
mod plugin;

use apiserver::ApiServer;
use gpuhook_dra::api::{self, health::DRAResourceHealthClient};
use gpuhook_dra::testkit::gpu_uuid;
use plugin::{plugin, wait_for, NODE};
use serde_json::json;

/// The node's slices: accepted by the validating API server, NVIDIA's attributes; another
/// node's slice untouched; a device going unhealthy is tainted (new pool generation) and
/// reported on the health stream.
#[tokio::test]
async fn slices_and_health() {
    let dir = tempfile::tempdir().unwrap();
    let api = ApiServer::start(NODE);
    let other = json!({"metadata": {"name": "node-b-gpu.nvidia.com-0"}, "spec": {"driver": "gpu.nvidia.com", "nodeName": "node-b", "pool": {"name": "node-b", "generation": 1, "resourceSliceCount": 1}, "devices": []}});
    api.state
        .lock()
        .unwrap()
        .slices
        .insert("node-b-gpu.nvidia.com-0".into(), other.clone());
    let p = plugin(dir.path(), &api);
    wait_for("slices", || api.slices().len() == 2).await;
    let ours = api.state.lock().unwrap().slices["node-a-gpu.nvidia.com-0"].clone();
    assert_eq!(api.state.lock().unwrap().refused, []);
    let devs = ours["spec"]["devices"].as_array().unwrap();
    assert_eq!(devs.len(), 3);
    assert_eq!(devs[0]["attributes"]["type"], json!({"string": "gpu"}));
    assert_eq!(
        devs[0]["attributes"]["uuid"],
        json!({"string": gpu_uuid(0)})
    );
    assert_eq!(
        devs[0]["capacity"]["memory"],
        json!({"value": (81559u64 << 20).to_string()})
    );
    assert_eq!(devs[1]["attributes"]["type"], json!({"string": "mig"}));
    assert_eq!(ours["spec"]["pool"]["generation"], 1);
    assert_eq!(
        api.state.lock().unwrap().slices["node-b-gpu.nvidia.com-0"],
        other
    );
    let k = kubelet::register(&dir.path().join("plugins_registry"), "gpu.nvidia.com").await;
    let mut health = DRAResourceHealthClient::new(k.channel.clone());
    let mut stream = health
        .node_watch_resources(api::NodeWatchResourcesRequest {})
        .await
        .unwrap()
        .into_inner();
    let first = stream.message().await.unwrap().unwrap();
    assert_eq!(first.devices.len(), 3);
    assert!(first
        .devices
        .iter()
        .all(|d| d.health == api::HealthStatus::Healthy as i32));
    p.unhealthy.send_modify(|m| {
        m.insert(gpu_uuid(0), "critical Xid 48".into());
    });
    let next = stream.message().await.unwrap().unwrap();
    let d0 = next
        .devices
        .iter()
        .find(|d| d.device.as_ref().unwrap().device_name == "gpu-0")
        .unwrap();
    assert_eq!(d0.health, api::HealthStatus::Unhealthy as i32);
    assert_eq!(d0.message, "critical Xid 48");
    wait_for("tainted slice", || {
        api.slices()
            .iter()
            .any(|s| s["spec"]["pool"]["generation"] == 2)
    })
    .await;
    let ours = api.state.lock().unwrap().slices["node-a-gpu.nvidia.com-0"].clone();
    assert_eq!(
        ours["spec"]["devices"][0]["taints"][0]["key"],
        "gpu.nvidia.com/unhealthy"
    );
    assert!(ours["spec"]["devices"][1]["taints"].is_null());
    assert_eq!(api.state.lock().unwrap().refused, []);
    p.stop().await;
}

/// KEP-5075 slices (multi-allocatable GPUs with request policies) pass the same validation.
#[test]
fn consumable_capacity_slices_pass_validation() {
    use gpuhook_dra::slices::{build, UnhealthyPolicy};
    let devs = gpuhook_dra::devices::catalogue(
        &gpuhook_dra::testkit::inventory(),
        std::path::Path::new("/nonexistent"),
    );
    let unhealthy = std::collections::BTreeMap::new();
    let slices = build(
        "gpu.nvidia.com",
        NODE,
        &devs,
        &unhealthy,
        UnhealthyPolicy::Taint,
        true,
        1,
    )
    .unwrap();
    for s in &slices {
        apiserver::validate_slice(s, NODE).unwrap();
    }
    assert_eq!(
        slices[0]["spec"]["devices"][0]["allowMultipleAllocations"],
        true
    );
}
