//! The watch against an in-memory API server: pods that join a prepared claim are indexed
//! without a new prepare, pods that leave lose their entry, API errors and a re-created claim
//! remove nothing, unprepare still removes everything.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{json, Value};

use super::*;
use crate::cdi_claim::ClaimCdi;
use crate::checkpoint::Checkpoint;
use crate::config::Allowed;
use crate::devices::catalogue;
use crate::driver::{ClaimRef, DriverOptions};
use crate::kube::{Cluster, KubeError};
use crate::podindex::PodIndex;
use crate::testkit::{claim, inventory, MemCluster};
use crate::timeslice::TimeSlicer;

#[derive(Debug)]
struct NoSlicer;
impl TimeSlicer for NoSlicer {
    fn set(&self, _: &str, _: crate::config::Interval) -> Result<(), String> {
        Ok(())
    }
}

/// [`MemCluster`] that answers 503 to everything while `down`.
#[derive(Debug, Default)]
struct Flaky {
    mem: MemCluster,
    down: AtomicBool,
}

impl Flaky {
    fn check(&self) -> Result<(), KubeError> {
        if !self.down.load(Ordering::SeqCst) {
            return Ok(());
        }
        Err(KubeError::Status {
            method: "GET".into(),
            path: "/x".into(),
            code: 503,
            reason: "ServiceUnavailable".into(),
            message: "etcd leader changed".into(),
        })
    }
}

impl Cluster for Flaky {
    fn get_claim(&self, ns: &str, name: &str) -> Result<Value, KubeError> {
        self.check()?;
        self.mem.get_claim(ns, name)
    }
    fn get_pod(&self, ns: &str, name: &str) -> Result<Value, KubeError> {
        self.check()?;
        self.mem.get_pod(ns, name)
    }
    fn list_slices(&self, node: &str, driver: &str) -> Result<Vec<Value>, KubeError> {
        self.mem.list_slices(node, driver)
    }
    fn create_slice(&self, slice: &Value) -> Result<(), KubeError> {
        self.mem.create_slice(slice)
    }
    fn replace_slice(&self, name: &str, slice: &Value) -> Result<(), KubeError> {
        self.mem.replace_slice(name, slice)
    }
    fn delete_slice(&self, name: &str) -> Result<(), KubeError> {
        self.mem.delete_slice(name)
    }
}

fn driver(dir: &Path, cluster: Arc<Flaky>) -> Driver {
    let opts = DriverOptions {
        driver: "gpu.nvidia.com".into(),
        node: "node-a".into(),
        checkpoint: dir.join("checkpoint.json"),
        cdi: ClaimCdi {
            dir: dir.join("cdi"),
            edit_options: gpuhook_cdi::EditOptions::new("/usr/bin/gpuhook"),
            capabilities: [gpuhook_node::Capability::Compute].into(),
        },
        mps: crate::testkit::mps_options(
            dir.join("mps"),
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
        cluster,
        Arc::new(NoSlicer),
        cp,
    )
}

const CLAIM: &str = "shared";
const UID: &str = "c7a1e0d2-0000-4000-8000-000000000001";

/// Pod `name` (UID `uid`) whose container `main` uses the claim through `spec.resourceClaims`
/// and whose container `log` uses nothing.
fn pod(name: &str, uid: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": "ns", "uid": uid},
           "spec": {"containers": [
               {"name": "main", "resources": {"claims": [{"name": "g"}]}},
               {"name": "log"}],
            "resourceClaims": [{"name": "g", "resourceClaimName": CLAIM}]}})
}

/// The shared claim (UID `uid`) reserved for `pods` (name, UID).
fn shared(uid: &str, pods: &[(&str, &str)]) -> Value {
    let mut c = claim("ns", CLAIM, uid, "node-a", &[("gpu", "gpu-0")], vec![]);
    let r: Vec<Value> = pods
        .iter()
        .map(|(n, u)| json!({"resource": "pods", "name": n, "uid": u}))
        .collect();
    c["status"]["reservedFor"] = json!(r);
    c
}

fn file(dir: &Path, pod_uid: &str) -> PathBuf {
    dir.join(format!("pods/{pod_uid}.json"))
}

/// The IDs pod `pod_uid`'s container `main` has for the claim (`None`: no entry).
fn main_ids(dir: &Path, pod_uid: &str) -> Option<Vec<String>> {
    let bytes = std::fs::read(file(dir, pod_uid)).ok()?;
    let idx: PodIndex = serde_json::from_slice(&bytes).unwrap();
    idx.claims.get(UID).map(|c| c["main"].clone())
}

fn set_pod(c: &Flaky, name: &str, uid: &str) {
    let mut pods = c.mem.pods.lock().unwrap();
    pods.insert(("ns".into(), name.into()), pod(name, uid));
}

#[tokio::test]
async fn pods_that_join_and_leave_a_prepared_claim_follow_without_a_prepare() {
    let t = tempfile::tempdir().unwrap();
    let c = Arc::new(Flaky::default());
    c.mem.add_claim(shared(UID, &[("a", "pod-a")]));
    set_pod(&c, "a", "pod-a");
    let d = driver(t.path(), c.clone());
    let r = ClaimRef {
        namespace: "ns".into(),
        name: CLAIM.into(),
        uid: UID.into(),
    };
    let ids = d.prepare(&r).await.unwrap();
    let want = Some(ids[0].cdi_device_ids.clone());
    assert_eq!(main_ids(t.path(), "pod-a"), want);
    let mut w = ClaimWatch::default();
    w.tick(&d).await;
    assert_eq!(main_ids(t.path(), "pod-a"), want, "nothing changed");

    // Pod b joins: reserved, but not readable yet (tried again), then readable.
    c.mem
        .add_claim(shared(UID, &[("a", "pod-a"), ("b", "pod-b")]));
    w.tick(&d).await;
    assert!(!file(t.path(), "pod-b").exists());
    set_pod(&c, "b", "pod-b");
    w.tick(&d).await;
    assert_eq!(main_ids(t.path(), "pod-b"), want, "b indexed by the watch");

    // The API server fails, the claim is deleted, or re-created under another UID: nothing is
    // removed, though reservedFor no longer names a.
    c.down.store(true, Ordering::SeqCst);
    w.tick(&d).await;
    c.down.store(false, Ordering::SeqCst);
    c.mem.claims.lock().unwrap().clear();
    w.tick(&d).await;
    c.mem.add_claim(shared("other-uid", &[("b", "pod-b")]));
    w.tick(&d).await;
    assert_eq!(main_ids(t.path(), "pod-a"), want);
    assert_eq!(main_ids(t.path(), "pod-b"), want);

    // a leaves (the claim as the API server has it): a's entry goes, b's stays.
    c.mem.add_claim(shared(UID, &[("b", "pod-b")]));
    w.tick(&d).await;
    assert!(
        !file(t.path(), "pod-a").exists(),
        "a's emptied file removed"
    );
    assert_eq!(main_ids(t.path(), "pod-b"), want);

    // A restarted plugin (a new watch) knows b from the index files; unprepare removes it.
    let mut w2 = ClaimWatch::default();
    w2.tick(&d).await;
    assert_eq!(main_ids(t.path(), "pod-b"), want);
    d.unprepare(UID).await.unwrap();
    assert!(!file(t.path(), "pod-b").exists());
    w2.tick(&d).await;
    assert!(
        w2.claims.is_empty(),
        "an unprepared claim is no longer followed"
    );
}

#[tokio::test]
async fn a_claim_not_prepared_or_pods_not_using_it_write_nothing() {
    let t = tempfile::tempdir().unwrap();
    let c = Arc::new(Flaky::default());
    c.mem.add_claim(shared(UID, &[("a", "pod-a")]));
    let mut other = pod("a", "pod-a");
    other["spec"]["resourceClaims"][0]["resourceClaimName"] = json!("another-claim");
    c.mem
        .pods
        .lock()
        .unwrap()
        .insert(("ns".into(), "a".into()), other);
    let d = driver(t.path(), c.clone());
    let mut w = ClaimWatch::default();
    w.tick(&d).await;
    assert!(
        !t.path().join("pods").exists(),
        "no claim prepared: nothing read"
    );
    let r = ClaimRef {
        namespace: "ns".into(),
        name: CLAIM.into(),
        uid: UID.into(),
    };
    d.prepare(&r).await.unwrap();
    w.tick(&d).await;
    assert!(!file(t.path(), "pod-a").exists());
    let known = w.claims[UID].known.clone().unwrap();
    assert_eq!(known.into_iter().collect::<Vec<_>>(), ["pod-a"]);
}
