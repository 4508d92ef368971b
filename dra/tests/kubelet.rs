//! The plugin driven as the kubelet drives it, over its real sockets, with a fake API server
//! that validates what it is sent: registration, NodePrepareResources / NodeUnprepareResources
//! (v1 and v1beta1), per-claim errors, restart through the checkpoint (slices and health:
//! `slices.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "common/apiserver.rs"]
mod apiserver;
#[path = "common/kubelet.rs"]
mod kubelet;
#[path = "common/plugin.rs"]
mod plugin;

use std::path::Path;

use apiserver::ApiServer;
use gpuhook_dra::api::{self, v1::DRAPluginClient, v1beta1};
use gpuhook_dra::testkit::{claim, opaque};
use plugin::{plugin, specs, NODE};
use serde_json::json;
use tonic::transport::Channel;

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

/// The spec resolves the ID the way gpuhook-runtime and CDI runtimes resolve names.
fn resolves_like_a_runtime(dir: &Path, ids: &[String]) {
    let reg = gpuhook_cdi::Registry::load(&[dir.join("cdi")]);
    let mut oci = json!({"linux": {}});
    gpuhook_cdi::apply_devices(&mut oci, &reg, ids).unwrap();
    assert!(oci.to_string().contains("/dev/nvidia0"), "{oci}");
}

/// Unprepares both claims, twice (idempotent); no spec is left.
async fn unprepare_both(v1: &mut DRAPluginClient<Channel>, dir: &Path) {
    let un = api::NodeUnprepareResourcesRequest {
        claims: vec![
            kubelet::claim("ns", "one-gpu", "uid-1"),
            kubelet::claim("ns", "one-mig", "uid-2"),
        ],
    };
    for _ in 0..2 {
        let u = v1
            .node_unprepare_resources(un.clone())
            .await
            .unwrap()
            .into_inner();
        assert_eq!(u.claims.len(), 2);
        assert!(u.claims.values().all(|c| c.error.is_empty()));
        assert!(specs(dir).is_empty());
    }
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
    resolves_like_a_runtime(dir.path(), &c.devices[0].cdi_device_ids);
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
    unprepare_both(&mut v1, dir.path()).await;
    p.stop().await;
}

type BadCase = (
    &'static str,
    Vec<(&'static str, &'static str)>,
    Vec<serde_json::Value>,
    &'static str,
);

/// (claim name, results, configs, expected error) of claims that must fail.
fn bad_cases() -> Vec<BadCase> {
    let cfg = |p: serde_json::Value| vec![opaque(&[], p)];
    let gpu_cfg = |sharing: serde_json::Value| json!({"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig", "sharing": sharing});
    vec![
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
    ]
}

/// Bad claims in one call with a good one (on another device: while a claim is being prepared
/// its devices are reserved to it): each bad claim gets its own error, nothing of it is left,
/// the good one is prepared.
#[tokio::test]
async fn bad_claims_fail_alone() {
    let dir = tempfile::tempdir().unwrap();
    let api = ApiServer::start(NODE);
    let bad = bad_cases();
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
        &[("mig", "gpu-1-mig-1g10gb-10-0")],
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
