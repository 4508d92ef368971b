//! NVIDIA's config rules, case by case (the whole corpus runs in `tests/kdp_corpus.rs`).
use super::*;

fn run(text: &str) -> Result<Vec<String>, String> {
    let v: Value = yaml_serde::from_str(text).unwrap();
    check(&v).map_err(|e| e.to_string())
}

#[test]
fn device_refs_are_classified_as_nvidia_does() {
    for ok in [
        "0",
        "0:0",
        "GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c",
        "MIG-3eb87630-93d5-b2b6-b8ff-9b359caf4ee2",
        "MIG-GPU-662077db-fa3f-0d8f-9502-21ab0ef058a2/10/0",
    ] {
        assert!(is_device_ref(ok), "{ok}");
    }
    for bad in [
        "-1",
        "GPU-UUID",
        "MIG-UUID",
        "invalid-UUID",
        "MIG-GPU-662077db-fa3f-0d8f-9502-21ab0ef058a2",
        "0:",
    ] {
        assert!(!is_device_ref(bad), "{bad}");
    }
}

#[test]
fn version_names_and_mps_with_mixed() {
    assert!(run("flags: {migStrategy: none}").is_ok());
    assert!(run("version: v2").unwrap_err().contains("unknown version"));
    let e = run("version: v1\nflags: {migStrategy: mixed}\nsharing: {mps: {resources: [{name: gpu, replicas: 2}]}}")
        .unwrap_err();
    assert!(
        e.starts_with("flags.migStrategy:") && e.contains("not supported with MPS"),
        "{e}"
    );
    let e = run("sharing: {timeSlicing: {resources: [{name: \"$x$\", replicas: 2}]}}").unwrap_err();
    assert!(
        e.starts_with("sharing.timeSlicing.resources[0].name:"),
        "{e}"
    );
    let e = run("sharing: {timeSlicing: {resources: [{name: gpu, replicas: 1}]}}").unwrap_err();
    assert!(e.contains(">= 2"), "{e}");
    // MPS keeps our replicas: 1.
    assert!(run("sharing: {mps: {resources: [{name: gpu, replicas: 1}]}}").is_ok());
    assert_eq!(max_mps_replicas(Some((7, 0))), 16);
    assert_eq!(max_mps_replicas(Some((7, 5))), 48);
}

#[test]
fn unknown_keys_are_warnings_that_name_them() {
    let w = run("version: v1\nnotAField: 1\nflags: {migStrategy: single, notAFlag: true}\nsharing: {mps: {resources: [{name: gpu, replicas: 2, replica: 3}]}}").unwrap();
    assert_eq!(w.len(), 3, "{w:?}");
    assert!(w[0].starts_with("notAField: unknown key"), "{w:?}");
    assert!(w.iter().any(|x| x.starts_with("flags.notAFlag")), "{w:?}");
    assert!(
        w.iter()
            .any(|x| x.starts_with("sharing.mps.resources[0].replica:")),
        "{w:?}"
    );
}
