#![allow(clippy::unwrap_used)]

use super::*;
use crate::config::{Interval, Sharing};

fn result(request: &str, device: &str) -> AllocationResult {
    AllocationResult {
        request: request.into(),
        driver: "gpu.nvidia.com".into(),
        pool: "node-a".into(),
        device: device.into(),
        admin_access: None,
        share_id: None,
        consumed_capacity: None,
    }
}

/// NVIDIA's precedence: the last config naming the request wins; else the last one without
/// requests of the device's kind; naming a request of the other kind is an error.
#[test]
fn resolution_follows_nvidia() {
    let gpu = |i: &str| DeviceConfig {
        kind: ConfigKind::Gpu,
        sharing: Some(Sharing::TimeSlicing(Interval::parse(i).unwrap())),
    };
    let configs = vec![
        (vec![], gpu("Short")),
        (vec!["a".to_string()], gpu("Medium")),
        (vec![], gpu("Long")),
        (vec!["a".to_string()], gpu("Default")),
    ];
    let got = config_for(&configs, &result("a", "gpu-0"), ConfigKind::Gpu).unwrap();
    assert_eq!(got, Some(&gpu("Default")));
    let got = config_for(&configs, &result("b/sub", "gpu-1"), ConfigKind::Gpu).unwrap();
    assert_eq!(got, Some(&gpu("Long")));
    let got = config_for(&configs, &result("a/sub", "gpu-1"), ConfigKind::Gpu).unwrap();
    assert_eq!(
        got,
        Some(&gpu("Default")),
        "a sub-request matches its parent's name"
    );
    let err = config_for(
        &configs,
        &result("a", "gpu-0-mig-1g10gb-1-0"),
        ConfigKind::Mig,
    )
    .unwrap_err();
    assert!(err.to_string().contains("cannot apply GpuConfig"), "{err}");
    assert_eq!(
        config_for(&configs, &result("b", "gpu-0-mig-x"), ConfigKind::Mig).unwrap(),
        None
    );
}
