//! Pod vs container annotations (issue #14.5). The shapes are containerd's: `containerSpec` in
//! containerd 1.6/1.7 `pkg/cri/server/container_create_linux.go` copies the `pod_annotations`
//! of the sandbox config, then the `container_annotations` of the container config (same keys),
//! then sets `io.kubernetes.cri.container-type = container` and `io.kubernetes.cri.sandbox-id`;
//! `sandboxContainerSpec` (`sandbox_run_linux.go`) copies the `pod_annotations` into the pause
//! container's spec with `container-type = sandbox`.

use std::path::Path;

use serde_json::{json, Value};

use super::super::{
    is_gpu_container, mps_cdi_names, parse, DeviceId, DeviceSelection, ParseOutcome, RequestPolicy,
};
use super::*;

const SANDBOX: &str = "4f2c0e8a9b1d";

/// A containerd task dir with the pod sandbox's bundle (pod annotations `pod`) and the
/// container's bundle; returns (tmp, container bundle).
fn task_dir(pod: Value) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let sandbox = tmp.path().join(SANDBOX);
    std::fs::create_dir_all(&sandbox).unwrap();
    let mut annotations = pod;
    annotations[CRI_CONTAINER_TYPE] = json!("sandbox");
    annotations[CRI_SANDBOX_ID] = json!(SANDBOX);
    std::fs::write(
        sandbox.join("config.json"),
        json!({"annotations": annotations}).to_string(),
    )
    .unwrap();
    let bundle = tmp.path().join("c0ffee");
    std::fs::create_dir_all(&bundle).unwrap();
    (tmp, bundle)
}

fn cri_container(mut annotations: Value) -> Value {
    annotations[CRI_CONTAINER_TYPE] = json!("container");
    annotations[CRI_SANDBOX_ID] = json!(SANDBOX);
    json!({"process": {"env": ["PATH=/bin"]}, "annotations": annotations})
}

fn devices(config: &Value, policy: &RequestPolicy) -> Vec<String> {
    match parse(config, policy).unwrap() {
        ParseOutcome::Gpu(r) => match r.devices {
            DeviceSelection::Ids(ids) => ids
                .iter()
                .map(|id| match id {
                    DeviceId::Cdi(q) => q.to_string(),
                    other => panic!("{other:?}"),
                })
                .collect(),
            other => panic!("{other:?}"),
        },
        ParseOutcome::NotGpu(_) => Vec::new(),
    }
}

#[test]
fn pod_annotation_is_not_a_grant_container_annotation_is() {
    // The pod author wrote cdi.k8s.io/pod: nvidia.com/gpu=all (pod_annotations passes it to
    // both specs); the device plugin's Allocate gave cdi.k8s.io/dp: nvidia.com/gpu=3.
    let (_tmp, bundle) = task_dir(json!({"cdi.k8s.io/pod": "nvidia.com/gpu=all"}));
    let c = cri_container(json!({
        "cdi.k8s.io/pod": "nvidia.com/gpu=all",
        "cdi.k8s.io/dp": "nvidia.com/gpu=3"
    }));
    let policy = RequestPolicy::default().for_container(&c, &bundle);
    assert_eq!(
        policy.pod_cdi_keys.iter().collect::<Vec<_>>(),
        ["cdi.k8s.io/pod"]
    );
    assert_eq!(devices(&c, &policy), ["nvidia.com/gpu=3"]);

    // Only the pod annotation: not a GPU container at all, on the fast path too.
    let c = cri_container(json!({"cdi.k8s.io/pod": "nvidia.com/gpu=all"}));
    let policy = RequestPolicy::default().for_container(&c, &bundle);
    assert!(!is_gpu_container(&c, &policy));
    assert!(devices(&c, &policy).is_empty());
    // Before the policy knew the provenance, this was every GPU.
    assert!(is_gpu_container(&c, &RequestPolicy::default()));
}

#[test]
fn container_annotation_replacing_a_pod_annotation_of_the_same_key_is_a_grant() {
    // Same key, different value: containerd applied the container's last (it wins).
    let (_tmp, bundle) = task_dir(json!({"cdi.k8s.io/dp": "nvidia.com/gpu=all"}));
    let c = cri_container(json!({"cdi.k8s.io/dp": "nvidia.com/gpu=1"}));
    let policy = RequestPolicy::default().for_container(&c, &bundle);
    assert!(policy.pod_cdi_keys.is_empty());
    assert_eq!(devices(&c, &policy), ["nvidia.com/gpu=1"]);
}

#[test]
fn allow_list_admits_pod_annotations_by_device() {
    let pod = json!({"cdi.k8s.io/mps": "nvidia.com/gpu-mps=0-half,nvidia.com/gpu=0"});
    let (_tmp, bundle) = task_dir(pod.clone());
    let c = cri_container(pod);
    let base = RequestPolicy {
        pod_cdi_allow: vec!["nvidia.com/gpu-mps=*".into()],
        ..RequestPolicy::default()
    };
    let policy = base.for_container(&c, &bundle);
    assert_eq!(
        mps_cdi_names(&c, &policy).unwrap(),
        ["nvidia.com/gpu-mps=0-half"]
    );
    // nvidia.com/gpu=0 is not allow-listed: ignored.
    assert!(devices(&c, &policy).is_empty());
    assert!(is_gpu_container(&c, &policy), "the MPS share is");
}

#[test]
fn sandbox_specs_and_unreadable_sandboxes_fail_closed() {
    let (_tmp, bundle) = task_dir(json!({}));
    // The pause container: all its annotations are the pod's.
    let mut c = cri_container(json!({"cdi.k8s.io/x": "nvidia.com/gpu=0"}));
    c["annotations"][CRI_CONTAINER_TYPE] = json!("sandbox");
    let policy = RequestPolicy::default().for_container(&c, &bundle);
    assert!(!is_gpu_container(&c, &policy));
    // A sandbox id that escapes the task dir, or names no sandbox: all pod annotations.
    for id in ["../etc", "..", "", "nope"] {
        let mut c = cri_container(json!({"cdi.k8s.io/x": "nvidia.com/gpu=0"}));
        c["annotations"][CRI_SANDBOX_ID] = json!(id);
        let policy = RequestPolicy::default().for_container(&c, &bundle);
        assert!(!is_gpu_container(&c, &policy), "{id:?}");
    }
    // An unknown container type: fail closed.
    let mut c = cri_container(json!({"cdi.k8s.io/x": "nvidia.com/gpu=0"}));
    c["annotations"][CRI_CONTAINER_TYPE] = json!("other");
    let policy = RequestPolicy::default().for_container(&c, &bundle);
    assert!(!is_gpu_container(&c, &policy));
}

#[test]
fn annotations_outside_cri_are_honoured_without_reading_anything() {
    // `ctr run --annotation`, nerdctl, podman: whoever runs the runtime is root.
    let c = json!({"annotations": {"cdi.k8s.io/x": "nvidia.com/gpu=0"}});
    let policy = RequestPolicy::default().for_container(&c, Path::new("/nonexistent/b"));
    assert!(policy.pod_cdi_keys.is_empty());
    assert_eq!(devices(&c, &policy), ["nvidia.com/gpu=0"]);
    // No CDI annotation: no sibling read even for a CRI container.
    let c = cri_container(json!({}));
    assert!(pod_annotation_keys(&c, Path::new("/nonexistent/b")).is_empty());
}

#[test]
fn allow_list_globs() {
    let p = vec![
        "nvidia.com/gpu-mps=*".to_string(),
        "nvidia.com/gpu=0".into(),
    ];
    assert!(allowed(&p, "nvidia.com/gpu-mps=1-small"));
    assert!(allowed(&p, " nvidia.com/gpu=0"));
    assert!(!allowed(&p, "nvidia.com/gpu=all"));
    assert!(!allowed(&[], "nvidia.com/gpu=0"));
}

/// A sandbox config.json that does not parse: the parser's error is named once in the chain.
#[test]
fn an_unparsable_sandbox_config_names_its_cause_once() {
    let (tmp, bundle) = task_dir(json!({}));
    let bad = tmp.path().join(SANDBOX).join("config.json");
    std::fs::write(&bad, b"{not json").unwrap();
    let err = sandbox_annotations(&bundle, SANDBOX).unwrap_err();
    let cause = serde_json::from_slice::<Value>(b"{not json")
        .unwrap_err()
        .to_string();
    let text: Vec<String> =
        std::iter::successors(Some(&err as &dyn std::error::Error), |e| e.source())
            .map(ToString::to_string)
            .collect();
    assert_eq!(text.join(": ").matches(&cause).count(), 1, "{text:?}");
}
