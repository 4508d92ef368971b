//! Prepare/unprepare against an in-memory API server: idempotence, one device for one claim
//! under concurrency, restarts through the checkpoint, rollback of refused claims.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde_json::json;

use super::*;
use crate::config::Interval;
use crate::devices::catalogue;
use crate::testkit::{claim, inventory, opaque, MemCluster};

/// Refuses `Long`, records what it set.
#[derive(Debug, Default)]
struct FakeSlicer(Mutex<Vec<(String, Interval)>>);

impl TimeSlicer for FakeSlicer {
    fn set(&self, uuid: &str, interval: Interval) -> Result<(), String> {
        if interval == Interval::Long {
            return Err("Setting compute policy failed: Not Supported".into());
        }
        self.0.lock().unwrap().push((uuid.into(), interval));
        Ok(())
    }
}

struct Node {
    dir: tempfile::TempDir,
    cluster: Arc<MemCluster>,
    slicer: Arc<FakeSlicer>,
}

impl Node {
    fn new() -> Node {
        Node {
            dir: tempfile::tempdir().unwrap(),
            cluster: Arc::new(MemCluster::default()),
            slicer: Arc::new(FakeSlicer::default()),
        }
    }
    fn cdi_dir(&self) -> PathBuf {
        self.dir.path().join("cdi")
    }
    fn driver(&self) -> Driver {
        let opts = DriverOptions {
            driver: "gpu.nvidia.com".into(),
            node: "node-a".into(),
            checkpoint: self.dir.path().join("checkpoint.json"),
            cdi: ClaimCdi {
                dir: self.cdi_dir(),
                edit_options: gpuhook_cdi::EditOptions::new("/usr/bin/gpuhook"),
                capabilities: [
                    gpuhook_node::Capability::Compute,
                    gpuhook_node::Capability::Utility,
                ]
                .into(),
            },
            mps: crate::testkit::mps_options(
                self.dir.path().join("mps"),
                "/nonexistent/nvidia-cuda-mps-control".into(),
            ),
            allowed: Allowed::default(),
        };
        let cp = Checkpoint::load(&opts.checkpoint, "boot").unwrap();
        let inv = inventory();
        let devices = catalogue(&inv, Path::new("/nonexistent"));
        Driver::new(
            opts,
            Arc::new(inv),
            devices,
            self.cluster.clone(),
            self.slicer.clone(),
            cp,
        )
    }
    fn specs(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(self.cdi_dir())
            .map(|d| {
                d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }
}

fn r(uid: &str) -> ClaimRef {
    ClaimRef {
        namespace: "ns".into(),
        name: format!("c-{uid}"),
        uid: uid.into(),
    }
}

fn ts(interval: &str) -> serde_json::Value {
    opaque(
        &[],
        json!({"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
        "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": interval}}}),
    )
}

#[tokio::test]
async fn prepare_writes_one_spec_and_is_idempotent() {
    let n = Node::new();
    n.cluster.add_claim(claim(
        "ns",
        "c-u1",
        "u1",
        "node-a",
        &[("gpu", "gpu-0")],
        vec![],
    ));
    let d = n.driver();
    let devs = d.prepare(&r("u1")).await.unwrap();
    assert_eq!(devs.len(), 1);
    assert_eq!(
        devs[0].cdi_device_ids,
        ["k8s.gpu.nvidia.com/claim=u1-gpu-0"]
    );
    assert_eq!(devs[0].requests, ["gpu"]);
    assert_eq!(devs[0].pool, "node-a");
    assert_eq!(n.specs(), ["k8s.gpu.nvidia.com-claim_u1.json"]);
    let spec: serde_json::Value = serde_json::from_slice(
        &std::fs::read(n.cdi_dir().join("k8s.gpu.nvidia.com-claim_u1.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(spec["kind"], "k8s.gpu.nvidia.com/claim");
    assert_eq!(spec["devices"][0]["name"], "u1-gpu-0");
    assert_eq!(
        spec["devices"][0]["containerEdits"]["deviceNodes"][0]["path"],
        "/dev/nvidia0"
    );
    // Idempotent, without asking the API server again.
    n.cluster.claims.lock().unwrap().clear();
    assert_eq!(d.prepare(&r("u1")).await.unwrap(), devs);
    d.unprepare("u1").await.unwrap();
    assert!(n.specs().is_empty());
    d.unprepare("u1").await.unwrap();
}

#[tokio::test]
async fn one_device_is_never_prepared_for_two_claims() {
    let n = Node::new();
    for u in ["a", "b"] {
        n.cluster.add_claim(claim(
            "ns",
            &format!("c-{u}"),
            u,
            "node-a",
            &[("gpu", "gpu-0")],
            vec![],
        ));
    }
    let d = Arc::new(n.driver());
    let (ra, rb) = (r("a"), r("b"));
    let (x, y) = tokio::join!(d.prepare(&ra), d.prepare(&rb));
    assert!(x.is_ok() != y.is_ok(), "{x:?} {y:?}");
    let err = x.err().or(y.err()).unwrap().to_string();
    assert!(err.contains("already prepared for claim"), "{err}");
    assert_eq!(n.specs().len(), 1);
}

#[tokio::test]
async fn a_refused_time_slice_leaves_nothing_and_spares_other_claims() {
    let n = Node::new();
    n.cluster.add_claim(claim(
        "ns",
        "c-bad",
        "bad",
        "node-a",
        &[("gpu", "gpu-0")],
        vec![ts("Long")],
    ));
    n.cluster.add_claim(claim(
        "ns",
        "c-ok",
        "ok",
        "node-a",
        &[("gpu", "gpu-0")],
        vec![ts("Short")],
    ));
    let d = n.driver();
    let err = d.prepare(&r("bad")).await.unwrap_err().to_string();
    assert!(
        err.contains("refused time-slice interval Long") && err.contains("Not Supported"),
        "{err}"
    );
    assert!(n.specs().is_empty());
    assert!(d.entry("bad").is_none());
    d.prepare(&r("ok")).await.unwrap();
    assert_eq!(
        n.slicer.0.lock().unwrap().as_slice(),
        [(crate::testkit::gpu_uuid(0), Interval::Short)]
    );
}

#[tokio::test]
async fn a_restart_neither_prepares_twice_nor_forgets() {
    let n = Node::new();
    n.cluster.add_claim(claim(
        "ns",
        "c-u1",
        "u1",
        "node-a",
        &[("mig", "gpu-1-mig-1g10gb-9-0")],
        vec![],
    ));
    let first = n.driver().prepare(&r("u1")).await.unwrap();
    n.cluster.claims.lock().unwrap().clear();
    let d = n.driver();
    assert_eq!(d.prepare(&r("u1")).await.unwrap(), first);
    d.unprepare("u1").await.unwrap();
    assert!(n.specs().is_empty());
    assert!(n.driver().entry("u1").is_none());
}

#[tokio::test]
async fn an_unfinished_preparation_is_rolled_back() {
    let n = Node::new();
    n.cluster.add_claim(claim(
        "ns",
        "c-u1",
        "u1",
        "node-a",
        &[("gpu", "gpu-0")],
        vec![],
    ));
    let d = n.driver();
    d.record(
        "u1",
        Some(ClaimEntry {
            state: ClaimState::PrepareStarted,
            namespace: "ns".into(),
            name: "c-u1".into(),
            devices: vec![],
            mps_dir: None,
            mig: Vec::new(),
        }),
    )
    .unwrap();
    std::fs::create_dir_all(n.cdi_dir()).unwrap();
    std::fs::write(n.cdi_dir().join("k8s.gpu.nvidia.com-claim_u1.json"), "{}").unwrap();
    // Unprepare of a started claim removes what it may have left.
    d.unprepare("u1").await.unwrap();
    assert!(n.specs().is_empty());
    d.prepare(&r("u1")).await.unwrap();
    assert_eq!(n.specs().len(), 1);
}

#[tokio::test]
async fn mps_without_a_control_daemon_is_a_claim_error_with_nothing_left() {
    let n = Node::new();
    let cfg = opaque(
        &[],
        json!({"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
        "sharing": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 50}}}),
    );
    n.cluster.add_claim(claim(
        "ns",
        "c-m",
        "m",
        "node-a",
        &[("gpu", "gpu-0")],
        vec![cfg],
    ));
    let d = n.driver();
    let err = d.prepare(&r("m")).await.unwrap_err().to_string();
    assert!(
        err.contains("MPS control daemon") && err.contains("nvidia-cuda-mps-control"),
        "{err}"
    );
    assert!(n.specs().is_empty());
    assert!(!n.dir.path().join("mps/m").exists());
    assert!(d.entry("m").is_none());
}

/// A claim reserved for two pods: the one the API server has gets its `gpu` container indexed
/// (not `log`); the missing one is a warning, not a failure; unprepare removes the entry.
#[tokio::test]
async fn prepare_indexes_the_pods_containers_and_unprepare_removes_them() {
    let n = Node::new();
    let mut c = claim("ns", "c-u9", "u9", "node-a", &[("gpu", "gpu-0")], vec![]);
    c["status"]["reservedFor"] = json!([
        {"resource": "pods", "name": "p", "uid": "pod-uid-1"},
        {"resource": "pods", "name": "gone", "uid": "pod-uid-2"}
    ]);
    n.cluster.add_claim(c);
    n.cluster.pods.lock().unwrap().insert(
        ("ns".into(), "p".into()),
        json!({"metadata": {"name": "p", "namespace": "ns", "uid": "pod-uid-1"},
               "spec": {"containers": [
                   {"name": "gpu", "resources": {"claims": [{"name": "g"}]}},
                   {"name": "log"}],
                "resourceClaims": [{"name": "g", "resourceClaimName": "c-u9"}]}}),
    );
    let d = n.driver();
    d.prepare(&r("u9")).await.unwrap();
    let path = n.dir.path().join("pods/pod-uid-1.json");
    let idx: crate::podindex::PodIndex =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let want = crate::podindex::ContainerIds::from([(
        "gpu".to_string(),
        vec!["k8s.gpu.nvidia.com/claim=u9-gpu-0".to_string()],
    )]);
    assert_eq!(idx.claims["u9"], want);
    assert!(!n.dir.path().join("pods/pod-uid-2.json").exists());
    d.unprepare("u9").await.unwrap();
    assert!(!path.exists(), "unprepare removes the claim's entry");
}

/// A re-read that gives the same devices (e.g. only a MIG device this plugin made for a
/// partitionable placement is new in the inventory) wakes nothing; a changed catalogue does.
#[tokio::test]
async fn relayout_reports_only_a_change_of_devices() {
    let n = Node::new();
    let d = n.driver();
    let inv = inventory();
    let same = catalogue(&inv, Path::new("/nonexistent"));
    assert!(!d.relayout(Arc::new(inv.clone()), same.clone()));
    let fewer: Vec<_> = same.into_iter().take(1).collect();
    assert!(d.relayout(Arc::new(inv), fewer.clone()));
    assert_eq!(*d.devices(), fewer);
}
