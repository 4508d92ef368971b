#![allow(clippy::unwrap_used)]

use super::*;

fn labels(kv: &[(&str, &str)]) -> Labels {
    kv.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn states_are_nvidias_four_values() {
    for s in [
        State::Pending,
        State::Rebooting,
        State::Success,
        State::Failed,
    ] {
        assert_eq!(State::parse(s.as_str()), Some(s));
    }
    let names: Vec<_> = [
        State::Pending,
        State::Rebooting,
        State::Success,
        State::Failed,
    ]
    .iter()
    .map(|s| s.as_str())
    .collect();
    assert_eq!(names, ["pending", "rebooting", "success", "failed"]);
    assert_eq!(State::parse("Success"), None);
}

#[test]
fn nvidias_five_deploy_labels_and_the_client_label_are_clients() {
    // k8s-mig-manager v0.15.0 pauses these (facts §7 step 7).
    for l in [
        "nvidia.com/gpu.deploy.device-plugin",
        "nvidia.com/gpu.deploy.gpu-feature-discovery",
        "nvidia.com/gpu.deploy.dcgm-exporter",
        "nvidia.com/gpu.deploy.dcgm",
        "nvidia.com/gpu.deploy.nvsm",
        "nvidia.com/gpu.deploy.client",
    ] {
        assert!(CLIENTS.iter().any(|c| c.label == l), "{l}");
    }
}

#[test]
fn process_names_match_as_the_kernel_cuts_them() {
    let dp = CLIENTS[0];
    assert!(dp.runs_as("nvidia-device-p"));
    assert!(dp.runs_as("gpuhook-device-\n"));
    assert!(!dp.runs_as("nvidia-device"));
    let mps = CLIENTS.iter().find(|c| c.gpu_scoped).unwrap();
    assert!(mps.runs_as("nvidia-cuda-mps") && mps.runs_as("gpu-mps-daemon"));
}

#[test]
fn pause_keeps_false_skips_absent_idle_clients_and_records_absent_holders() {
    let l = labels(&[
        ("nvidia.com/gpu.deploy.device-plugin", "true"),
        ("nvidia.com/gpu.deploy.dcgm", "false"),
        ("nvidia.com/gpu.deploy.mps-daemon", "true"),
    ]);
    let p = pause_for(&l, &["nvidia.com/gpu.deploy.dcgm-exporter"]);
    let want: Changes = [
        (
            "nvidia.com/gpu.deploy.device-plugin".to_string(),
            Some("true".to_string()),
        ),
        ("nvidia.com/gpu.deploy.dcgm-exporter".to_string(), None),
    ]
    .into();
    assert_eq!(p.previous, want);
    assert!(p.labels().values().all(|v| v.as_deref() == Some(PAUSED)));
    assert_eq!(Pause::from_record(&p.record()), Some(p));
    assert_eq!(Pause::from_record("[1]"), None);
    assert_eq!(Pause::from_record(r#"{"a": 1}"#), None);
}

#[test]
fn orphaned_pauses_go_back_to_true_unless_recorded() {
    let l = labels(&[
        ("nvidia.com/gpu.deploy.device-plugin", PAUSED),
        ("nvidia.com/gpu.deploy.dcgm", PAUSED),
        ("unrelated", PAUSED),
    ]);
    let rec = Pause {
        previous: [("nvidia.com/gpu.deploy.dcgm".to_string(), None)].into(),
    };
    let o = orphaned_pauses(&l, &rec);
    let want: Changes = [(
        "nvidia.com/gpu.deploy.device-plugin".to_string(),
        Some("true".to_string()),
    )]
    .into();
    assert_eq!(o, want);
}
