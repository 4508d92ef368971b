use std::os::unix::fs::PermissionsExt;

use serde_json::json;

use super::*;

fn dev(request: &str, name: &str) -> PreparedDevice {
    PreparedDevice {
        requests: vec![request.into()],
        pool: "node-a".into(),
        device: name.into(),
        cdi_device_ids: vec![format!("k8s.gpu.nvidia.com/claim=c1-{name}")],
        share_id: None,
    }
}

/// A pod as the API server returns it (core/v1 field names): `main` uses pod claim `gpus`
/// (from a template: the claim name is in `status.resourceClaimStatuses`), `init` only its
/// `big` request, `sidecar` uses another claim and `log` none.
fn pod() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns", "uid": "0b6c1c9e-5a0e-4d4e-9a43-1f2e3d4c5b6a"},
        "spec": {
            "initContainers": [{"name": "init", "resources": {"claims": [{"name": "gpus", "request": "big"}]}}],
            "containers": [
                {"name": "main", "image": "x", "resources": {"claims": [{"name": "gpus"}]}},
                {"name": "sidecar", "resources": {"claims": [{"name": "other"}]}},
                {"name": "log", "resources": {"limits": {"cpu": "1"}}}
            ],
            "resourceClaims": [
                {"name": "gpus", "resourceClaimTemplateName": "two-gpus"},
                {"name": "other", "resourceClaimName": "shared-claim"}
            ]
        },
        "status": {"resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": "p-gpus-x7k2q"}]}
    })
}

const UID: &str = "0b6c1c9e-5a0e-4d4e-9a43-1f2e3d4c5b6a";

#[test]
fn template_claim_maps_to_the_containers_that_name_it() {
    let devices = [dev("small", "gpu-0"), dev("big/fast", "gpu-1")];
    let got = containers_of_claim(pod(), "ns", UID, "p-gpus-x7k2q", &devices).unwrap();
    let id = |n: &str| format!("k8s.gpu.nvidia.com/claim=c1-{n}");
    let want = ContainerIds::from([
        ("init".to_string(), vec![id("gpu-1")]),
        ("main".to_string(), vec![id("gpu-0"), id("gpu-1")]),
    ]);
    assert_eq!(got, want);
}

#[test]
fn direct_claim_name_maps_and_unrelated_claims_map_nothing() {
    let devices = [dev("gpu", "gpu-3")];
    let got = containers_of_claim(pod(), "ns", UID, "shared-claim", &devices).unwrap();
    assert_eq!(got.keys().collect::<Vec<_>>(), ["sidecar"]);
    let none = containers_of_claim(pod(), "ns", UID, "p-gpus-other", &devices).unwrap();
    assert!(none.is_empty(), "{none:?}");
}

#[test]
fn a_recreated_pod_or_another_namespace_is_refused() {
    let e = containers_of_claim(pod(), "ns", "1111", "shared-claim", &[]).unwrap_err();
    assert!(e.to_string().contains("re-created"), "{e}");
    let e = containers_of_claim(pod(), "other", UID, "shared-claim", &[]).unwrap_err();
    assert!(e.to_string().contains("namespace ns"), "{e}");
}

#[test]
fn record_and_remove_keep_other_claims_and_private_modes() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("pods");
    let c = |n: &str| ContainerIds::from([(n.to_string(), vec![format!("a/b={n}")])]);
    record(&dir, UID, "claim-1", c("main")).unwrap();
    record(&dir, UID, "claim-2", c("init")).unwrap();
    let path = dir.join(format!("{UID}.json"));
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!((mode(&dir), mode(&path)), (0o700, 0o600));
    let idx: PodIndex = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(idx.claims["claim-1"], c("main"));
    assert_eq!(idx.claims["claim-2"], c("init"));
    remove_claim(&dir, "claim-1").unwrap();
    let idx: PodIndex = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(idx.claims.keys().collect::<Vec<_>>(), ["claim-2"]);
    remove_claim(&dir, "claim-2").unwrap();
    assert!(!path.exists(), "an empty index file is removed");
    remove_claim(&t.path().join("absent"), "claim-2").unwrap();
}

#[test]
fn a_pod_uid_never_leaves_the_dir() {
    let d = Path::new("/x");
    assert_eq!(path_of(d, UID), Some(d.join(format!("{UID}.json"))));
    for bad in ["", "../etc", "a/b", "a.json", &"a".repeat(65)] {
        assert_eq!(path_of(d, bad), None, "{bad:?}");
    }
    assert!(record(d, "../x", "c", ContainerIds::new()).is_err());
}

#[test]
fn pods_of_claim_lists_the_pods_with_an_entry_for_it() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("pods");
    let c = ContainerIds::from([("main".to_string(), vec!["a/b=c".to_string()])]);
    record(&dir, "pod-1", "claim-1", c.clone()).unwrap();
    record(&dir, "pod-2", "claim-1", c.clone()).unwrap();
    record(&dir, "pod-3", "claim-2", c).unwrap();
    std::fs::write(dir.join("notes.txt"), "x").unwrap();
    std::fs::write(dir.join("pod-bad.json"), "{not json").unwrap();
    let got = pods_of_claim(&dir, "claim-1").unwrap();
    assert_eq!(got.into_iter().collect::<Vec<_>>(), ["pod-1", "pod-2"]);
    // A corrupt file fails remove_claim, but the claim still leaves every other file.
    let e = remove_claim(&dir, "claim-1").unwrap_err();
    assert!(e.to_string().contains("pod-bad.json"), "{e}");
    assert!(pods_of_claim(&dir, "claim-1").unwrap().is_empty());
    std::fs::remove_file(dir.join("pod-bad.json")).unwrap();
    assert!(pods_of_claim(&dir, "claim-9").unwrap().is_empty());
    assert!(pods_of_claim(&t.path().join("absent"), "claim-1")
        .unwrap()
        .is_empty());
}
