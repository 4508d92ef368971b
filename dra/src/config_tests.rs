//! NVIDIA's opaque config (dra-facts §5): the shapes of its example claims
//! (`GpuConfig` with `TimeSlicing`/`Long`, with `MPS` 50 % / 10Gi) and its validation rules.
#![allow(clippy::unwrap_used)]

use serde_json::json;

use super::*;

fn all() -> Allowed {
    Allowed::default()
}

#[test]
fn time_slicing_example() {
    let c = decode(
        &json!({"apiVersion": API_VERSION, "kind": "GpuConfig",
                "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}}),
        all(),
    )
    .unwrap();
    assert_eq!(c.kind, ConfigKind::Gpu);
    assert_eq!(c.sharing, Some(Sharing::TimeSlicing(Interval::Long)));
    // NVIDIA's numbers for `--set-timeslice`.
    assert_eq!(
        [
            Interval::Default,
            Interval::Short,
            Interval::Medium,
            Interval::Long
        ]
        .map(|i| i as u32),
        [0, 1, 2, 3]
    );
}

#[test]
fn mps_example() {
    let c = decode(
        &json!({"apiVersion": API_VERSION, "kind": "GpuConfig",
                "sharing": {"strategy": "MPS", "mpsConfig": {
                    "defaultActiveThreadPercentage": 50,
                    "defaultPinnedDeviceMemoryLimit": "10Gi",
                    "defaultPerDevicePinnedMemoryLimit": {"0": "5Gi"}}}}),
        all(),
    )
    .unwrap();
    let Some(Sharing::Mps(m)) = c.sharing else {
        panic!("not MPS")
    };
    assert_eq!(m.active_thread_percentage, Some(50));
    assert_eq!(m.default_pinned_limit, Some(10 << 30));
    assert_eq!(m.per_device_pinned_limit.get("0"), Some(&(5 << 30)));
}

#[test]
fn mig_config_has_no_time_slice_interval() {
    let ok = decode(
        &json!({"apiVersion": API_VERSION, "kind": "MigDeviceConfig",
                "sharing": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 20}}}),
        all(),
    )
    .unwrap();
    assert_eq!(ok.kind, ConfigKind::Mig);
    let err = decode(
        &json!({"apiVersion": API_VERSION, "kind": "MigDeviceConfig",
                "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Short"}}}),
        all(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("timeSlicingConfig"), "{err}");
}

#[test]
fn refusals_name_the_problem() {
    let cases = [
        (
            json!({"apiVersion": "resource.nvidia.com/v1", "kind": "GpuConfig"}),
            "apiVersion \"resource.nvidia.com/v1\"",
        ),
        (
            json!({"apiVersion": API_VERSION, "kind": "TpuConfig"}),
            "kind \"TpuConfig\"",
        ),
        (
            json!({"apiVersion": API_VERSION, "kind": "GpuConfig", "shairng": {}}),
            "unknown field `shairng`",
        ),
        (
            json!({"apiVersion": API_VERSION, "kind": "GpuConfig", "sharing": {"strategy": "Fancy"}}),
            "strategy \"Fancy\"",
        ),
        (
            json!({"apiVersion": API_VERSION, "kind": "GpuConfig", "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Forever"}}}),
            "interval \"Forever\"",
        ),
        (
            json!({"apiVersion": API_VERSION, "kind": "GpuConfig", "sharing": {"strategy": "TimeSlicing", "mpsConfig": {}}}),
            "cannot use MpsConfig with the 'TimeSlicing' strategy",
        ),
        (
            json!({"apiVersion": API_VERSION, "kind": "GpuConfig", "sharing": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 150}}}),
            "150 is outside 0..100",
        ),
        (
            json!({"apiVersion": API_VERSION, "kind": "GpuConfig", "sharing": {"strategy": "MPS", "mpsConfig": {"defaultPinnedDeviceMemoryLimit": "512Ki"}}}),
            "below the smallest limit",
        ),
    ];
    for (params, want) in cases {
        let err = decode(&params, all()).unwrap_err().to_string();
        assert!(err.contains(want), "{params}: {err}");
    }
}

#[test]
fn disabled_strategy_is_refused() {
    let off = Allowed {
        time_slicing: false,
        ..Allowed::default()
    };
    let err = decode(
        &json!({"apiVersion": API_VERSION, "kind": "GpuConfig", "sharing": {"strategy": "TimeSlicing"}}),
        off,
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("\"TimeSlicing\" is selected"),
        "{err}"
    );
}
