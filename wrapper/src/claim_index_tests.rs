#![allow(clippy::unwrap_used)]

use serde_json::json;

use super::*;

const UID: &str = "0b6c1c9e-5a0e-4d4e-9a43-1f2e3d4c5b6a";

/// The annotations containerd 1.6's CRI plugin puts on a pod's container.
fn cri_spec(uid: &str, name: &str) -> Value {
    json!({"ociVersion": "1.0.2", "process": {"env": []}, "annotations": {
        "io.kubernetes.cri.container-type": "container",
        "io.kubernetes.cri.sandbox-id": "abc",
        CRI_SANDBOX_UID: uid,
        CRI_CONTAINER_NAME: name,
    }})
}

fn write_index(dir: &Path) {
    std::fs::write(
        dir.join(format!("{UID}.json")),
        json!({"claims": {
            "claim-1": {"main": ["k8s.gpu.nvidia.com/claim=c1-gpu-0"], "init": ["x.com/y=z"]},
            "claim-2": {"main": ["k8s.gpu.nvidia.com/claim=c2-gpu-1", "k8s.gpu.nvidia.com/claim=c1-gpu-0"]}
        }})
        .to_string(),
    )
    .unwrap();
}

#[test]
fn a_cri_container_gets_the_ids_of_every_claim_it_uses() {
    let t = tempfile::tempdir().unwrap();
    write_index(t.path());
    let mut policy = RequestPolicy::default();
    policy.pod_cdi_keys.insert(KEY.to_string());
    let spec = cri_spec(UID, "main");
    let got = with_claims(t.path(), &spec, &mut policy);
    assert_eq!(
        got["annotations"][KEY],
        "k8s.gpu.nvidia.com/claim=c1-gpu-0,k8s.gpu.nvidia.com/claim=c2-gpu-1"
    );
    assert!(
        !policy.pod_cdi_keys.contains(KEY),
        "the index is no pod annotation"
    );
    // The names go through the one request parser like a container annotation's.
    let req = gpuhook_request::ContainerRequest::read(&got, &policy).unwrap();
    let names: Vec<String> = req.cdi_names.iter().map(ToString::to_string).collect();
    assert_eq!(
        names,
        [
            "k8s.gpu.nvidia.com/claim=c1-gpu-0",
            "k8s.gpu.nvidia.com/claim=c2-gpu-1"
        ]
    );
}

#[test]
fn no_entry_no_file_or_not_a_cri_container_changes_nothing() {
    let t = tempfile::tempdir().unwrap();
    write_index(t.path());
    let mut policy = RequestPolicy::default();
    for spec in [
        cri_spec(UID, "log"),
        cri_spec("11111111-2222-3333-4444-555555555555", "main"),
        json!({"annotations": {CRI_SANDBOX_UID: UID, CRI_CONTAINER_NAME: "main"}}),
        json!({"annotations": {"io.kubernetes.cri.container-type": "sandbox",
                               CRI_SANDBOX_UID: UID, CRI_CONTAINER_NAME: "main"}}),
    ] {
        assert!(
            matches!(with_claims(t.path(), &spec, &mut policy), Cow::Borrowed(_)),
            "{spec}"
        );
    }
    let absent = t.path().join("absent");
    assert!(matches!(
        with_claims(&absent, &cri_spec(UID, "main"), &mut policy),
        Cow::Borrowed(_)
    ));
}

#[test]
fn annotation_values_never_build_a_path_outside_the_dir() {
    let d = Path::new("/idx");
    for (uid, name) in [
        ("../../etc/x", "main"),
        ("a/b", "main"),
        (UID, "../x"),
        (UID, "Main"),
        ("", "main"),
    ] {
        assert_eq!(index_file(d, &cri_spec(uid, name)), None, "{uid} {name}");
    }
    assert_eq!(
        index_file(d, &cri_spec(UID, "main")),
        Some((d.join(format!("{UID}.json")), "main".into()))
    );
}

#[test]
fn a_file_others_can_write_is_ignored() {
    use std::os::unix::fs::PermissionsExt;
    let t = tempfile::tempdir().unwrap();
    write_index(t.path());
    let path = t.path().join(format!("{UID}.json"));
    let mut policy = RequestPolicy::default();
    let spec = cri_spec(UID, "main");
    if nix::unistd::geteuid().is_root() {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(matches!(
            with_claims(t.path(), &spec, &mut policy),
            Cow::Owned(_)
        ));
    }
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    assert!(matches!(
        with_claims(t.path(), &spec, &mut policy),
        Cow::Borrowed(_)
    ));
}
