//! Health from NVML events (the device plugin's monitor) through the mock NVML: a critical Xid on
//! a GPU taints its device in this node's ResourceSlice and marks it unhealthy on the kubelet's
//! resource-health stream.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "common/apiserver.rs"]
mod apiserver;
#[path = "common/kubelet.rs"]
mod kubelet;
#[path = "common/plugin.rs"]
mod plugin;

use std::path::{Path, PathBuf};

use apiserver::ApiServer;
use gpuhook_dra::api::{self, health::DRAResourceHealthClient};
use gpuhook_dra::testkit::inventory;
use plugin::{plugin_full, wait_for, NODE};

/// The mock NVML next to our binary (`cargo build -p gpuhook-mock-nvml`), copied into `dir` with
/// a profile of the test GPUs (both whole here); `None` skips, except under GPUHOOK_REQUIRE_E2E=1.
fn mock_nvml(dir: &Path) -> Option<PathBuf> {
    let mock = PathBuf::from(env!("CARGO_BIN_EXE_gpuhook-dra-plugin"))
        .with_file_name("libgpuhook_mock_nvml.so");
    if !mock.is_file() {
        assert!(
            std::env::var_os("GPUHOOK_REQUIRE_E2E").is_none_or(|v| v != "1"),
            "{} is missing: cargo build -p gpuhook-mock-nvml",
            mock.display()
        );
        eprintln!("skipped: {} is missing", mock.display());
        return None;
    }
    let lib = dir.join("libnvidia-ml.so.570.158.01");
    std::fs::copy(&mock, &lib).unwrap();
    let mut profile = String::from(
        "name = \"dra-health\"\ndriver_version = \"570.158.01\"\ncuda_driver_version = \"12.8\"\n\
         lib_dir = \"/usr/lib64\"\n\n[majors]\nnvidia_uvm = 510\nnvidia_caps = 511\n",
    );
    for g in &inventory().gpus {
        profile.push_str(&format!(
            "\n[[gpus]]\nindex = {}\nminor = {}\nuuid = \"{}\"\npci_bus_id = \"{}\"\n\
             name = \"NVIDIA H100 80GB HBM3\"\narchitecture = \"hopper\"\ncompute_capability = \"9.0\"\n\
             brand = \"nvidia\"\nmemory_mib = 81559\n",
            g.index, g.minor, g.uuid, g.pci_bus_id
        ));
    }
    std::fs::write(dir.join("gpuhook-sim-profile.toml"), profile).unwrap();
    std::fs::create_dir_all(dir.join("gpuhook-sim-state")).unwrap();
    Some(lib)
}

fn gpu0_tainted(api: &ApiServer) -> bool {
    api.slices().iter().any(|s| {
        s["spec"]["devices"][0]["name"] == "gpu-0"
            && s["spec"]["devices"][0]["taints"][0]["key"] == "gpu.nvidia.com/unhealthy"
    })
}

#[tokio::test]
async fn a_critical_xid_taints_the_device_and_reaches_the_health_stream() {
    let files = tempfile::tempdir().unwrap();
    let Some(lib) = mock_nvml(files.path()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let api = ApiServer::start(NODE);
    let p = plugin_full(
        dir.path(),
        &api,
        Path::new("/nonexistent"),
        Some((files.path().into(), Some(lib))),
    );
    wait_for("slices", || !api.slices().is_empty()).await;
    assert!(!gpu0_tainted(&api));
    let k = kubelet::register(&dir.path().join("plugins_registry"), "gpu.nvidia.com").await;
    let mut health = DRAResourceHealthClient::new(k.channel.clone());
    let mut stream = health
        .node_watch_resources(api::NodeWatchResourcesRequest {})
        .await
        .unwrap()
        .into_inner();
    let gpu0 = inventory().gpus[0].uuid.clone();
    let events = files.path().join("gpuhook-sim-state/events");
    std::fs::write(&events, format!("xid {gpu0} 48\n")).unwrap();
    wait_for("tainted gpu-0", || gpu0_tainted(&api)).await;
    loop {
        let r = stream.message().await.unwrap().unwrap();
        let d = r
            .devices
            .iter()
            .find(|d| d.device.as_ref().unwrap().device_name == "gpu-0")
            .unwrap();
        if d.health == api::HealthStatus::Unhealthy as i32 {
            assert!(d.message.contains("48"), "{}", d.message);
            break;
        }
    }
    assert_eq!(api.state.lock().unwrap().refused, []);
    p.stop().await;
}
