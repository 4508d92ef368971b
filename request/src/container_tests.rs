//! Tests of [`ContainerRequest::read`] (the one value every later step takes) and of the
//! wrapper's pre-check [`has_cdi_request`] against it.

use std::collections::BTreeSet;

use serde_json::{json, Value};

use super::*;
use crate::tests::{config, privileged};
use crate::{
    has_cdi_request, is_gpu_container, limits, Capability, NotGpuReason, RequestPolicy,
    RequestSource,
};

fn with_annotations(mut c: Value, annotations: Value) -> Value {
    c["annotations"] = annotations;
    c
}

#[test]
fn one_read_gives_names_of_every_kind_the_gpu_request_and_privilege() {
    let c = with_annotations(
        privileged(config(&["NVIDIA_DRIVER_CAPABILITIES=utility"])),
        json!({
            "cdi.k8s.io/a": "nvidia.com/gpu=0, example.com/net=eth0",
            "cdi.k8s.io/b": "nvidia.com/gpu-mps=s1,nvidia.com/gpu=0,nvidia.com/gpu-mps=s1",
        }),
    );
    let r = ContainerRequest::read(&c, &RequestPolicy::default()).unwrap();
    assert!(r.privileged);
    let names: Vec<String> = r.cdi_names.iter().map(ToString::to_string).collect();
    assert_eq!(
        names,
        [
            "nvidia.com/gpu=0",
            "example.com/net=eth0",
            "nvidia.com/gpu-mps=s1"
        ]
    );
    assert_eq!(r.mps_names(), ["nvidia.com/gpu-mps=s1"]);
    let gpu = r.gpu().expect("a GPU request");
    assert_eq!(gpu.source, RequestSource::CdiAnnotations);
    assert_eq!(gpu.capabilities, BTreeSet::from([Capability::Utility]));
    // The same answers as the single-purpose readers.
    let policy = RequestPolicy::default();
    assert_eq!(parse(&c, &policy).unwrap(), r.gpu);
    assert_eq!(mps_cdi_names(&c, &policy).unwrap(), r.mps_names());
}

#[test]
fn a_container_without_a_gpu_request_still_reads_its_names() {
    let c = with_annotations(config(&[]), json!({"cdi.k8s.io/n": "example.com/net=eth0"}));
    let r = ContainerRequest::read(&c, &RequestPolicy::default()).unwrap();
    assert!(!r.privileged);
    assert_eq!(r.gpu, ParseOutcome::NotGpu(NotGpuReason::NoRequest));
    assert!(r.gpu().is_none());
    assert_eq!(r.cdi_names.len(), 1);
    assert!(r.mps_names().is_empty());
}

/// The wrapper reads a container's request only when one of the pre-checks says yes: a
/// container that has an admitted name, or a malformed annotation (an error to report), must
/// never be skipped, and one the pre-checks skip must have nothing to read.
#[test]
fn has_cdi_request_never_skips_a_name_or_an_error() {
    let pod_only = RequestPolicy {
        pod_cdi_keys: ["cdi.k8s.io/p".to_string()].into(),
        ..RequestPolicy::default()
    };
    let long = ",".repeat(limits::MAX_ID_LIST_BYTES + 1);
    let many: serde_json::Map<String, Value> = (0..=limits::MAX_ANNOTATIONS)
        .map(|i| (format!("k{i}"), json!("v")))
        .collect();
    let shapes = [
        json!(null),
        json!({}),
        json!({"other": "x"}),
        json!({"cdi.k8s.io/a": ""}),
        json!({"cdi.k8s.io/a": " , "}),
        json!({"cdi.k8s.io/a": "example.com/net=eth0"}),
        json!({"cdi.k8s.io/a": "not-a-name"}),
        json!({"cdi.k8s.io/a": 5}),
        json!({"cdi.k8s.io/p": "nvidia.com/gpu=0"}),
        json!({"cdi.k8s.io/a": long}),
        json!([1]),
        Value::Object(many),
    ];
    for policy in [RequestPolicy::default(), pod_only] {
        for annotations in &shapes {
            let c = with_annotations(config(&[]), annotations.clone());
            let read = ContainerRequest::read(&c, &policy);
            let needed = read.as_ref().map_or(true, |r| !r.cdi_names.is_empty());
            assert_eq!(
                has_cdi_request(&c, &policy) || is_gpu_container(&c, &policy),
                needed,
                "{annotations}: {read:?}"
            );
        }
    }
}

#[test]
fn mps_share_annotations_make_a_gpu_container_for_the_fast_path() {
    let policy = RequestPolicy::default();
    let mut c = config(&[]);
    c["annotations"] = json!({"cdi.k8s.io/mps": "nvidia.com/gpu-mps=0-half"});
    assert!(is_gpu_container(&c, &policy));
    // parse() leaves them to the prestart hook's CDI registry lookup.
    assert_eq!(
        parse(&c, &policy).unwrap(),
        ParseOutcome::NotGpu(NotGpuReason::NoRequest)
    );
    assert_eq!(
        mps_cdi_names(&c, &policy).unwrap(),
        ["nvidia.com/gpu-mps=0-half"]
    );

    c["annotations"] = json!({
        "cdi.k8s.io/a": "nvidia.com/gpu=1, nvidia.com/gpu-mps=0",
        "cdi.k8s.io/b": "nvidia.com/gpu-mps=0,example.com/net=eth0,nvidia.com/gpu-mpsx=1",
    });
    assert!(is_gpu_container(&c, &policy));
    assert_eq!(
        mps_cdi_names(&c, &policy).unwrap(),
        ["nvidia.com/gpu-mps=0"]
    );
    let ParseOutcome::Gpu(r) = parse(&c, &policy).unwrap() else {
        panic!("nvidia.com/gpu=1 requested");
    };
    assert_eq!(r.source, RequestSource::CdiAnnotations);

    // Other kinds alone stay non-GPU containers; a look-alike kind is not ours.
    c["annotations"] = json!({"cdi.k8s.io/x": "nvidia.com/gpu-mpsx=0"});
    assert!(!is_gpu_container(&c, &policy));
    assert!(mps_cdi_names(&c, &policy).unwrap().is_empty());
    c["annotations"] = json!({"cdi.k8s.io/x": "nvidia.com/gpu-mps=bad/name"});
    assert!(mps_cdi_names(&c, &policy).is_err());
}
