//! The plugin driven as the kubelet drives it, over its real sockets, with a fake API server
//! that validates what it is sent: registration, NodePrepareResources / NodeUnprepareResources
//! (v1 and v1beta1), per-claim errors, restart through the checkpoint, ResourceSlices and their
//! update on a health change, the resource-health stream.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "common/apiserver.rs"]
mod apiserver;
#[path = "common/kubelet.rs"]
mod kubelet;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use apiserver::ApiServer;
use gpuhook_dra::api::{self, health::DRAResourceHealthClient, v1::DRAPluginClient, v1beta1};
use gpuhook_dra::cdi_claim::ClaimCdi;
use gpuhook_dra::config::{Allowed, Interval};
use gpuhook_dra::driver::DriverOptions;
use gpuhook_dra::kube::HttpCluster;
use gpuhook_dra::mps::MpsOptions;
use gpuhook_dra::run::{start, RunOptions, Running};
use gpuhook_dra::server::Sockets;
use gpuhook_dra::slices::UnhealthyPolicy;
use gpuhook_dra::testkit::{claim, gpu_uuid, inventory, opaque};
use gpuhook_dra::timeslice::TimeSlicer;
use serde_json::json;

const NODE: &str = "node-a";

#[derive(Debug)]
struct Slicer;
impl TimeSlicer for Slicer {
    fn set(&self, _: &str, i: Interval) -> Result<(), String> {
        match i {
            Interval::Long => Err("Not Supported".into()),
            _ => Ok(()),
        }
    }
}

fn plugin(dir: &Path, api: &ApiServer) -> Running {
    let opts = DriverOptions {
        driver: "gpu.nvidia.com".into(),
        node: NODE.into(),
        checkpoint: dir.join("plugin/checkpoint.json"),
        cdi: ClaimCdi {
            dir: dir.join("cdi"),
            edit_options: gpuhook_cdi::EditOptions::new("/usr/bin/gpuhook"),
            capabilities: [gpuhook_node::Capability::Compute].into(),
        },
        mps: MpsOptions {
            root: dir.join("plugin/mps"),
            driver_root: "/".into(),
            control_binary: "/nonexistent".into(),
            start_timeout: Duration::from_secs(2),
            command_timeout: Duration::from_secs(2),
        },
        allowed: Allowed::default(),
    };
    let run = RunOptions {
        sockets: Sockets {
            registry_dir: dir.join("plugins_registry"),
            plugin_dir: dir.join("plugin"),
        },
        sys_root: dir.join("sys-root"),
        publish: true,
        unhealthy: UnhealthyPolicy::Taint,
        republish: Duration::from_secs(3600),
        health_service: true,
        nvml: None,
    };
    let cluster = Arc::new(HttpCluster::plain(&api.url).unwrap());
    start(opts, run, inventory(), cluster, Arc::new(Slicer)).unwrap()
}

fn specs(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir.join("cdi"))
        .map(|d| d.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

async fn wait_for<F: Fn() -> bool>(what: &str, f: F) {
    for _ in 0..500 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting for {what}");
}

/// `GetInfo` as the reference helper answers it; the kubelet picks v1, the first it supports.
#[tokio::test]
async fn registration_offers_v1_then_v1beta1_and_health() {
    let dir = tempfile::tempdir().unwrap();
    let api = ApiServer::start(NODE);
    let p = plugin(dir.path(), &api);
    let k = kubelet::register(&dir.path().join("plugins_registry"), "gpu.nvidia.com").await;
    assert_eq!(
        k.info.supported_versions,
        [
            "v1.DRAPlugin",
            "v1beta1.DRAPlugin",
            "v1alpha1.DRAResourceHealth"
        ]
    );
    assert_eq!(
        k.info.endpoint,
        dir.path().join("plugin/dra.sock").display().to_string()
    );
    assert_eq!(k.version, "v1.DRAPlugin");
    assert_eq!(
        p.servers
            .registration
            .status()
            .borrow()
            .as_ref()
            .map(|s| s.plugin_registered),
        Some(true)
    );
    p.stop().await;
    assert!(!dir
        .path()
        .join("plugins_registry/gpu.nvidia.com-reg.sock")
        .exists());
}

#[tokio::test]
async fn prepare_and_unprepare_over_v1_and_v1beta1() {
    let dir = tempfile::tempdir().unwrap();
    let api = ApiServer::start(NODE);
    api.add_claim(claim(
        "ns",
        "one-gpu",
        "uid-1",
        NODE,
        &[("gpu", "gpu-0")],
        vec![],
    ));
    api.add_claim(claim(
        "ns",
        "one-mig",
        "uid-2",
        NODE,
        &[("mig", "gpu-1-mig-1g10gb-9-0")],
        vec![],
    ));
    let p = plugin(dir.path(), &api);
    let k = kubelet::register(&dir.path().join("plugins_registry"), "gpu.nvidia.com").await;
    let mut v1 = DRAPluginClient::new(k.channel.clone());
    let req = api::NodePrepareResourcesRequest {
        claims: vec![kubelet::claim("ns", "one-gpu", "uid-1")],
    };
    let resp = v1
        .node_prepare_resources(req.clone())
        .await
        .unwrap()
        .into_inner();
    let c = &resp.claims["uid-1"];
    assert_eq!(c.error, "");
    assert_eq!(
        c.devices,
        [api::Device {
            request_names: vec!["gpu".into()],
            pool_name: NODE.into(),
            device_name: "gpu-0".into(),
            cdi_device_ids: vec!["k8s.gpu.nvidia.com/claim=uid-1-gpu-0".into()],
            share_id: None,
        }]
    );
    // The spec resolves the ID the way gpuhook-runtime and CDI runtimes resolve names.
    let reg = gpuhook_cdi::Registry::load(&[dir.path().join("cdi")]);
    let mut oci = json!({"linux": {}});
    gpuhook_cdi::apply_devices(&mut oci, &reg, &c.devices[0].cdi_device_ids).unwrap();
    assert!(oci.to_string().contains("/dev/nvidia0"), "{oci}");
    // Again: the same answer (the kubelet retries after a restart of its own).
    assert_eq!(
        v1.node_prepare_resources(req).await.unwrap().into_inner(),
        resp
    );
    // The v1beta1 service of the same socket (a 1.32/1.33 kubelet).
    let mut beta = v1beta1::DRAPluginClient::new(k.channel.clone());
    let r2 = beta
        .node_prepare_resources(api::NodePrepareResourcesRequest {
            claims: vec![kubelet::claim("ns", "one-mig", "uid-2")],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        r2.claims["uid-2"].devices[0].cdi_device_ids,
        ["k8s.gpu.nvidia.com/claim=uid-2-gpu-1-mig-1g10gb-9-0"]
    );
    assert_eq!(specs(dir.path()).len(), 2);
    let un = api::NodeUnprepareResourcesRequest {
        claims: vec![
            kubelet::claim("ns", "one-gpu", "uid-1"),
            kubelet::claim("ns", "one-mig", "uid-2"),
        ],
    };
    let u = v1
        .node_unprepare_resources(un.clone())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(u.claims.len(), 2);
    assert!(u.claims.values().all(|c| c.error.is_empty()));
    assert!(specs(dir.path()).is_empty());
    assert!(v1
        .node_unprepare_resources(un)
        .await
        .unwrap()
        .into_inner()
        .claims
        .values()
        .all(|c| c.error.is_empty()));
    p.stop().await;
}

/// Bad claims in one call with a good one: each bad claim gets its own error, nothing of it is
/// left, the good one is prepared.
#[tokio::test]
async fn bad_claims_fail_alone() {
    let dir = tempfile::tempdir().unwrap();
    let api = ApiServer::start(NODE);
    let cfg = |p: serde_json::Value| vec![opaque(&[], p)];
    let gpu_cfg = |sharing: serde_json::Value| json!({"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig", "sharing": sharing});
    let bad = [
        (
            "kind",
            vec![("gpu", "gpu-0")],
            cfg(json!({"apiVersion": "resource.nvidia.com/v1beta1", "kind": "FancyConfig"})),
            "kind \"FancyConfig\" is not supported",
        ),
        (
            "version",
            vec![("gpu", "gpu-0")],
            cfg(json!({"apiVersion": "resource.nvidia.com/v9", "kind": "GpuConfig"})),
            "apiVersion \"resource.nvidia.com/v9\"",
        ),
        (
            "elsewhere",
            vec![("gpu", "gpu-5")],
            vec![],
            "\"gpu-5\" of pool \"node-a\" is not on this node",
        ),
        (
            "threads",
            vec![("gpu", "gpu-0")],
            cfg(gpu_cfg(
                json!({"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 101}}),
            )),
            "101 is outside 0..100",
        ),
        (
            "memory",
            vec![("gpu", "gpu-0")],
            cfg(gpu_cfg(
                json!({"strategy": "MPS", "mpsConfig": {"defaultPinnedDeviceMemoryLimit": "90Gi"}}),
            )),
            "above the memory of gpu-0",
        ),
        (
            "slice",
            vec![("gpu", "gpu-0")],
            cfg(gpu_cfg(
                json!({"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}),
            )),
            "refused time-slice interval Long",
        ),
    ];
    let mut claims = Vec::new();
    for (name, results, configs, _) in &bad {
        api.add_claim(claim(
            "ns",
            name,
            &format!("uid-{name}"),
            NODE,
            results,
            configs.clone(),
        ));
        claims.push(kubelet::claim("ns", name, &format!("uid-{name}")));
    }
    api.add_claim(claim(
        "ns",
        "good",
        "uid-good",
        NODE,
        &[("gpu", "gpu-0")],
        vec![],
    ));
    claims.push(kubelet::claim("ns", "good", "uid-good"));
    claims.push(kubelet::claim("ns", "missing", "uid-missing"));
    let p = plugin(dir.path(), &api);
    let k = kubelet::register(&dir.path().join("plugins_registry"), "gpu.nvidia.com").await;
    let mut v1 = DRAPluginClient::new(k.channel.clone());
    let resp = v1
        .node_prepare_resources(api::NodePrepareResourcesRequest { claims })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(resp.claims.len(), bad.len() + 2, "every claim is answered");
    for (name, _, _, want) in &bad {
        let c = &resp.claims[&format!("uid-{name}")];
        assert!(c.error.contains(want), "{name}: {}", c.error);
        assert!(c.devices.is_empty());
    }
    assert!(
        resp.claims["uid-missing"].error.contains("404"),
        "{}",
        resp.claims["uid-missing"].error
    );
    assert_eq!(resp.claims["uid-good"].error, "");
    assert_eq!(
        specs(dir.path()),
        [dir.path()
            .join("cdi/k8s.gpu.nvidia.com-claim_uid-good.json")]
    );
    let cp: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("plugin/checkpoint.json")).unwrap())
            .unwrap();
    assert_eq!(
        cp["claims"].as_object().unwrap().keys().collect::<Vec<_>>(),
        ["uid-good"]
    );
    p.stop().await;
}

/// A claim prepared before a restart is answered from the checkpoint (the API server is not
/// asked again) and unprepared after it.
#[tokio::test]
async fn restart_keeps_prepared_claims() {
    let dir = tempfile::tempdir().unwrap();
    let api = ApiServer::start(NODE);
    api.add_claim(claim("ns", "c", "uid-r", NODE, &[("gpu", "gpu-0")], vec![]));
    let p = plugin(dir.path(), &api);
    let k = kubelet::register(&dir.path().join("plugins_registry"), "gpu.nvidia.com").await;
    let req = api::NodePrepareResourcesRequest {
        claims: vec![kubelet::claim("ns", "c", "uid-r")],
    };
    let first = DRAPluginClient::new(k.channel)
        .node_prepare_resources(req.clone())
        .await
        .unwrap()
        .into_inner();
    p.stop().await;
    api.state.lock().unwrap().claims.clear();
    let p = plugin(dir.path(), &api);
    let k = kubelet::register(&dir.path().join("plugins_registry"), "gpu.nvidia.com").await;
    let mut v1 = DRAPluginClient::new(k.channel);
    assert_eq!(
        v1.node_prepare_resources(req).await.unwrap().into_inner(),
        first
    );
    let u = v1
        .node_unprepare_resources(api::NodeUnprepareResourcesRequest {
            claims: vec![kubelet::claim("ns", "c", "uid-r")],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(u.claims["uid-r"].error, "");
    assert!(specs(dir.path()).is_empty());
    p.stop().await;
}

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
