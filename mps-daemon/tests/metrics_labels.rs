//! The label shape of `/metrics`, checked by parsing the exposition text back.
//!
//! Expected label names come from NVIDIA's dcgm-exporter, so that gpuhook's series join with
//! `DCGM_FI_*` ones: `internal/pkg/rendermetrics/render_metrics.go`, `gpuMetricsFormat`, writes
//! every GPU series as
//! `{gpu="<index>",UUID="<uuid>",pci_bus_id="...",device="...",modelName="...",Hostname="..."}`
//! (`uuid` instead of `UUID` only with `--use-old-namespace`), and
//! `internal/pkg/collector/base_collector.go` sets `GPUDevice: fmt.Sprintf("nvidia%d",
//! mi.DeviceInfo.GPU)`. Pod attribution labels are `pod`, `namespace`, `container`
//! (`internal/pkg/transformation/const.go`). dcgm-exporter's main branch renamed `Hostname` to
//! `hostname` in commit d5e5f51 (#655, 2026-05-12), after release 4.4.1-4.6.0; we follow the
//! released spelling.
// Test support: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use gpu_mps_daemon::metrics::render_for;
use gpu_mps_daemon::metrics_parse::{parse_text, Sample};
use gpu_mps_daemon::metrics_registry::{family_of_sample, FAMILIES, GPU_LABELS};
use gpu_mps_daemon::status::{Board, GpuIdentity, GpuStatus};

const UUID: &str = "GPU-6c7a4d4e-1f3b-4c83-9b8a-0f7e5d2a1b3c";

fn board() -> Board {
    let gpu: GpuStatus = serde_json::from_value(serde_json::json!({
        "uuid": UUID, "index": 2, "resource": "nvidia.com/gpu", "replicas": 4,
        "state": "ready", "pid": 99, "activeThreadPercentage": 25,
        "pinnedMemoryLimitMiB": 2048, "appliedActiveThreadPercentage": 25.0,
        "appliedPinnedMemoryLimitMiB": 2048, "restarts": 1, "lastError": null,
        "lastErrorAt": null, "readySince": 1, "pipeDirectory": "/p", "logDirectory": "/l",
        "shmDirectory": null,
        "usage": {"servers": [7], "clients": [
            {"pid": 10, "server": 7, "container": "c0ffee", "runtime": "containerd"},
            {"pid": 11, "server": 7, "container": "c0ffee", "runtime": "containerd"},
            {"pid": 12, "server": 7, "container": null, "runtime": null}],
          "terminations": {"over_cap": 3}, "serversLimited": 1, "limitDrifts": {"server": 2}}
    }))
    .expect("GpuStatus from JSON");
    let board = Board::default();
    board.insert(gpu);
    board.set_identities(
        [(
            UUID.to_string(),
            GpuIdentity {
                model_name: "NVIDIA H100 80GB HBM3".into(),
                pci_bus_id: "00000000:3B:00.0".into(),
            },
        )]
        .into(),
    );
    board.observe_command(UUID, "get_server_list", 0.02);
    board
}

fn samples() -> (String, Vec<Sample>) {
    let text = render_for(&board(), "gpu-node-7");
    let s = parse_text(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    (text, s)
}

#[test]
fn every_series_carries_dcgm_exporter_gpu_labels() {
    let (text, samples) = samples();
    assert!(samples.len() > 20, "{text}");
    for s in &samples {
        let l = |k: &str| s.labels.get(k).map(String::as_str);
        assert_eq!(l("gpu"), Some("2"), "{s:?}");
        assert_eq!(l("UUID"), Some(UUID), "{s:?}");
        assert_eq!(l("pci_bus_id"), Some("00000000:3B:00.0"), "{s:?}");
        assert_eq!(l("device"), Some("nvidia2"), "{s:?}");
        assert_eq!(l("modelName"), Some("NVIDIA H100 80GB HBM3"), "{s:?}");
        assert_eq!(l("Hostname"), Some("gpu-node-7"), "{s:?}");
        // Deprecated spelling, kept for one release.
        assert_eq!(l("uuid"), Some(UUID), "{s:?}");
        let fam = family_of_sample(&s.name).unwrap_or_else(|| panic!("{} not in registry", s.name));
        let allowed = fam.all_labels();
        for k in s.labels.keys() {
            assert!(
                allowed.contains(&k.as_str()),
                "{}: label {k} not in registry",
                s.name
            );
        }
        let le = usize::from(s.name.ends_with("_bucket"));
        let expected = allowed.len() - usize::from(allowed.contains(&"le")) + le;
        assert_eq!(
            s.labels.len(),
            expected,
            "{s:?} lacks a label of {allowed:?}"
        );
    }
}

#[test]
fn exposition_writes_exactly_the_registry_families() {
    let (text, samples) = samples();
    let heads: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .collect();
    let expected: Vec<String> = FAMILIES
        .iter()
        .map(|f| format!("{} {}", f.name, f.kind.as_str()))
        .collect();
    assert_eq!(heads, expected);
    for f in &FAMILIES {
        assert!(
            samples.iter().any(|s| s.name.starts_with(f.name)),
            "no sample of {} in\n{text}",
            f.name
        );
    }
}

fn value(samples: &[Sample], name: &str, extra: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .find(|s| {
            s.name == name
                && extra
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .unwrap_or_else(|| panic!("no {name} {extra:?}"))
        .value
}

#[test]
fn renamed_families_keep_their_deprecated_names_with_the_same_values() {
    let (_, s) = samples();
    // Prometheus naming: ratios in 0..1, not percentages.
    assert_eq!(value(&s, "gpuhook_mps_active_thread_ratio", &[]), 0.25);
    assert_eq!(value(&s, "gpuhook_mps_active_thread_percentage", &[]), 25.0);
    let new = value(
        &s,
        "gpuhook_mps_container_clients",
        &[("container_id", "c0ffee"), ("runtime", "containerd")],
    );
    assert_eq!(new, 2.0);
    let old = value(
        &s,
        "gpuhook_mps_clients_per_container",
        &[("container", "c0ffee"), ("runtime", "containerd")],
    );
    assert_eq!(old, new);
    assert_eq!(
        value(&s, "gpuhook_mps_limit_drift_total", &[("scope", "server")]),
        2.0
    );
    for f in FAMILIES.iter().filter(|f| f.replaced_by.is_some()) {
        assert!(f.help.starts_with("Deprecated, use "), "{f:?}");
        let by = f.replaced_by.unwrap_or_default();
        assert!(FAMILIES
            .iter()
            .any(|g| g.name == by && g.replaced_by.is_none()));
    }
}

#[test]
fn gpu_labels_are_dcgm_exporters_in_its_order() {
    // render_metrics.go gpuMetricsFormat: gpu, UUID, pci_bus_id, device, modelName, Hostname.
    assert_eq!(
        &GPU_LABELS[..6],
        [
            "gpu",
            "UUID",
            "pci_bus_id",
            "device",
            "modelName",
            "Hostname"
        ]
    );
    let (text, _) = samples();
    let line = text
        .lines()
        .find(|l| l.starts_with("gpuhook_mps_ready{"))
        .unwrap_or_default();
    assert!(
        line.starts_with(&format!(
            "gpuhook_mps_ready{{gpu=\"2\",UUID=\"{UUID}\",pci_bus_id="
        )),
        "{line}"
    );
}
