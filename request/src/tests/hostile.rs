//! Hostile and odd-shaped configs: clean errors, and the fast path agrees with `parse`.

use serde_json::json;

use super::*;

#[test]
fn hostile_configs_fail_cleanly() {
    let p = RequestPolicy::default();
    let e = parse(&config(&["NVIDIA_VISIBLE_DEVICES=0", "BROKEN"]), &p).unwrap_err();
    assert!(
        matches!(e, RequestError::EnvEntryWithoutEquals { index: 1, .. }),
        "{e}"
    );
    let e = parse(&config(&["NVIDIA_VISIBLE_DEVICES=0\u{0}1"]), &p)
        .unwrap_err()
        .to_string();
    assert!(e.contains("control character"), "{e}");
    let big = format!("NVIDIA_VISIBLE_DEVICES={}", vec!["0"; 5000].join(","));
    assert!(matches!(
        parse(&config(&[&big]), &p).unwrap_err(),
        RequestError::LimitExceeded { .. }
    ));
    let huge = format!("JUNK={}", "x".repeat(limits::MAX_VALUE_BYTES + 1));
    let e = parse(&config(&["NVIDIA_VISIBLE_DEVICES=0", &huge]), &p)
        .unwrap_err()
        .to_string();
    assert!(e.contains("limit of 1 MiB"), "{e}");
    let many: Vec<String> = (0..=limits::MAX_ENV_ENTRIES)
        .map(|i| format!("V{i}=x"))
        .collect();
    let refs: Vec<&str> = many.iter().map(String::as_str).collect();
    assert!(parse(&config(&refs), &p)
        .unwrap_err()
        .to_string()
        .contains("10000 entries"));
    let mut c = config(&[]);
    c["annotations"] = json!({"cdi.k8s.io/x": vec!["nvidia.com/gpu=0"; 5000].join(",")});
    assert!(matches!(
        parse(&c, &p).unwrap_err(),
        RequestError::LimitExceeded { .. }
    ));
    // The fast path never panics on junk shapes.
    for junk in [
        json!(null),
        json!([]),
        json!({"process": {"env": [1, null, "X"]}}),
        json!({"annotations": "x"}),
    ] {
        assert!(!is_gpu_container(&junk, &mounts_policy()));
    }
}

#[test]
fn fast_path_matches_parse_on_many_shapes() {
    let p = RequestPolicy::default();
    for env in [
        vec!["NVIDIA_VISIBLE_DEVICES= , "],
        vec!["NVIDIA_VISIBLE_DEVICES=none"],
        vec!["NVIDIA_VISIBLE_DEVICES=VOID"],
        vec!["CUDA_VERSION="],
        vec!["CUDA_VERSION=12.0", "NVIDIA_REQUIRE_CUDA="],
        vec!["NVIDIA_VISIBLE_DEVICES=1", "NVIDIA_VISIBLE_DEVICES="],
    ] {
        let _ = parse_with(&config(&env), &p);
        let _ = parse_with(&config(&env), &secure_policy());
        let _ = parse_with(&privileged(config(&env)), &secure_policy());
    }
}
