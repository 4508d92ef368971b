//! The claim index (containerd 1.6) for a shared claim, over the plugin's real sockets and the
//! fake API server: the fake kubelet prepares the claim once, for pod `a`; pod `b` then joins
//! the claim's `status.reservedFor` and, with no second `NodePrepareResources` (the kubelet
//! serves it from its claim-info cache: `pkg/kubelet/cm/dra/manager.go`, `prepareResources`,
//! "If this claim is already prepared, continue"), gets its index file from the plugin's watch;
//! `a` leaves and loses its file; `NodeUnprepareResources` removes `b`'s.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "common/apiserver.rs"]
mod apiserver;
#[path = "common/kubelet.rs"]
mod kubelet;
#[path = "common/plugin.rs"]
mod plugin;

use std::path::{Path, PathBuf};
use std::time::Duration;

use apiserver::ApiServer;
use gpuhook_dra::api::{self, v1::DRAPluginClient};
use gpuhook_dra::podindex::PodIndex;
use gpuhook_dra::testkit::claim;
use plugin::{plugin, NODE};
use serde_json::{json, Value};

const UID: &str = "9d3c2b1a-7e6f-4a5b-8c9d-0e1f2a3b4c5d";

fn pod(name: &str, uid: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "ns", "uid": uid},
           "spec": {"containers": [{"name": "cuda", "resources": {"claims": [{"name": "gpu"}]}}],
                    "resourceClaims": [{"name": "gpu", "resourceClaimName": "shared"}]}})
}

fn shared(pods: &[(&str, &str)]) -> Value {
    let mut c = claim("ns", "shared", UID, NODE, &[("gpu", "gpu-0")], vec![]);
    let r: Vec<Value> = pods
        .iter()
        .map(|(n, u)| json!({"resource": "pods", "name": n, "uid": u}))
        .collect();
    c["status"]["reservedFor"] = json!(r);
    c
}

fn file(dir: &Path, pod_uid: &str) -> PathBuf {
    dir.join(format!("plugin/pods/{pod_uid}.json"))
}

fn ids(dir: &Path, pod_uid: &str) -> Option<Vec<String>> {
    let idx: PodIndex = serde_json::from_slice(&std::fs::read(file(dir, pod_uid)).ok()?).ok()?;
    idx.claims.get(UID).map(|c| c["cuda"].clone())
}

/// Waits up to 60 s for `f` (a loaded CI machine).
async fn wait_for<F: Fn() -> bool>(what: &str, f: F) {
    for _ in 0..3000 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test]
async fn a_pod_joining_a_prepared_claim_is_indexed_without_a_prepare() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let api = ApiServer::start(NODE);
    api.add_claim(shared(&[("a", "pod-a")]));
    api.add_pod(pod("a", "pod-a"));
    let mut p = plugin(d, &api);
    p.follow_reservations(Duration::from_millis(50));
    let k = kubelet::register(&d.join("plugins_registry"), "gpu.nvidia.com").await;
    let mut v1 = DRAPluginClient::new(k.channel.clone());
    let resp = v1
        .node_prepare_resources(api::NodePrepareResourcesRequest {
            claims: vec![kubelet::claim("ns", "shared", UID)],
        })
        .await
        .unwrap()
        .into_inner();
    let want = resp.claims[UID].devices[0].cdi_device_ids.clone();
    assert_eq!(want, [format!("k8s.gpu.nvidia.com/claim={UID}-gpu-0")]);
    assert_eq!(ids(d, "pod-a").as_ref(), Some(&want));

    // b joins the claim (the scheduler reserved it); the kubelet does not call the plugin.
    api.add_pod(pod("b", "pod-b"));
    api.add_claim(shared(&[("a", "pod-a"), ("b", "pod-b")]));
    wait_for("pod b's index file", || {
        ids(d, "pod-b").as_ref() == Some(&want)
    })
    .await;
    let log = api.state.lock().unwrap().log.clone();
    assert!(log.contains(&("GET".into(), "/api/v1/namespaces/ns/pods/b".into())));

    // a's pod finished: the controller removed it from reservedFor.
    api.add_claim(shared(&[("b", "pod-b")]));
    wait_for("pod a's file removed", || !file(d, "pod-a").exists()).await;
    assert_eq!(ids(d, "pod-b").as_ref(), Some(&want), "b keeps its entry");

    let u = v1
        .node_unprepare_resources(api::NodeUnprepareResourcesRequest {
            claims: vec![kubelet::claim("ns", "shared", UID)],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(u.claims[UID].error, "");
    assert!(!file(d, "pod-b").exists(), "unprepare removes every entry");
    p.stop().await;
}
