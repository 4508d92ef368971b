//! cdiVersion: which versions exist and the lowest one a spec's contents need.
//!
//! Runtimes refuse versions newer than the CDI library they embed (podman 4.3 stops at 0.5.0), so
//! a generator must write the *minimum* version its contents require, never "the latest".

use std::cmp::Ordering;

use crate::spec::Spec;

/// Every cdiVersion the CDI specification has defined, oldest first.
pub const KNOWN_VERSIONS: &[&str] = &[
    "0.1.0", "0.2.0", "0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0",
];

/// The lowest version we ever emit.
pub const FLOOR_VERSION: &str = "0.3.0";

/// Parses `X.Y.Z` (an optional leading `v` is accepted) into a comparable triple.
pub fn parse_version(v: &str) -> Option<(u32, u32, u32)> {
    let v = v.strip_prefix('v').unwrap_or(v);
    let mut parts = v.split('.');
    let mut next = || parts.next()?.parse::<u32>().ok();
    let triple = (next()?, next()?, next()?);
    if v.split('.').count() != 3 {
        return None;
    }
    Some(triple)
}

/// True for one of [`KNOWN_VERSIONS`].
pub fn is_known_version(v: &str) -> bool {
    let Some(parsed) = parse_version(v) else {
        return false;
    };
    KNOWN_VERSIONS
        .iter()
        .any(|k| parse_version(k) == Some(parsed))
}

/// Compares two versions; unparsable ones sort first.
pub fn compare_versions(a: &str, b: &str) -> Ordering {
    parse_version(a).cmp(&parse_version(b))
}

/// The lowest cdiVersion that can express `spec`, with the reason (for error messages).
pub fn minimum_version_reason(spec: &Spec) -> (&'static str, &'static str) {
    let edits = std::iter::once(&spec.container_edits)
        .chain(spec.devices.iter().map(|d| &d.container_edits));
    let mut need = (FLOOR_VERSION, "floor");
    let mut bump = |v: &'static str, why: &'static str| {
        if compare_versions(v, need.0) == Ordering::Greater {
            need = (v, why);
        }
    };
    for e in edits {
        if !e.net_devices.is_empty() {
            bump("1.1.0", "netDevices");
        }
        if let Some(rdt) = &e.intel_rdt {
            if !rdt.schemata.is_empty() || rdt.enable_monitoring {
                bump("1.1.0", "intelRdt.schemata/enableMonitoring");
            }
            bump("0.7.0", "intelRdt");
        }
        if !e.additional_gids.is_empty() {
            bump("0.7.0", "additionalGids");
        }
        if e.device_nodes.iter().any(|n| n.host_path.is_some()) {
            bump("0.5.0", "a deviceNode has hostPath");
        }
        if e.mounts.iter().any(|m| m.mount_type.is_some()) {
            bump("0.4.0", "a mount has a type");
        }
    }
    if !spec.annotations.is_empty() || spec.devices.iter().any(|d| !d.annotations.is_empty()) {
        bump("0.6.0", "annotations");
    }
    if let Some((_, class)) = spec.kind.split_once('/') {
        if class.contains('.') {
            bump("0.6.0", "a dot in the class of kind");
        }
    }
    if spec
        .devices
        .iter()
        .any(|d| d.name.starts_with(|c: char| c.is_ascii_digit()))
    {
        bump("0.5.0", "a device name starts with a digit");
    }
    need
}

/// The lowest cdiVersion that can express `spec`.
pub fn minimum_version(spec: &Spec) -> &'static str {
    minimum_version_reason(spec).0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{ContainerEdits, Device, DeviceNode, IntelRdt, Mount, NetDevice};

    fn spec_with(name: &str, edits: ContainerEdits) -> Spec {
        Spec {
            cdi_version: String::new(),
            kind: "vendor.com/dev".into(),
            devices: vec![Device {
                name: name.into(),
                container_edits: edits,
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    fn env() -> ContainerEdits {
        ContainerEdits {
            env: vec!["A=1".into()],
            ..Default::default()
        }
    }

    #[test]
    fn parse_and_known() {
        assert_eq!(parse_version("0.5.0"), Some((0, 5, 0)));
        assert_eq!(parse_version("v1.1.0"), Some((1, 1, 0)));
        assert_eq!(parse_version("1.1"), None);
        assert_eq!(parse_version("1.1.0.1"), None);
        assert!(is_known_version("0.8.0"));
        assert!(!is_known_version("0.9.0"));
        assert!(!is_known_version("latest"));
        assert_eq!(compare_versions("0.10.0", "0.9.0"), Ordering::Greater);
    }

    #[test]
    fn floor() {
        assert_eq!(minimum_version(&spec_with("gpu", env())), "0.3.0");
    }

    #[test]
    fn each_feature_bumps() {
        let mount_type = ContainerEdits {
            mounts: vec![Mount {
                host_path: "/a".into(),
                container_path: "/a".into(),
                mount_type: Some("bind".into()),
                ..Default::default()
            }],
            ..Default::default()
        };
        assert_eq!(minimum_version(&spec_with("gpu", mount_type)), "0.4.0");
        assert_eq!(minimum_version(&spec_with("0", env())), "0.5.0");
        let host_path = ContainerEdits {
            device_nodes: vec![DeviceNode {
                path: "/dev/x".into(),
                host_path: Some("/r/dev/x".into()),
                ..Default::default()
            }],
            ..Default::default()
        };
        assert_eq!(minimum_version(&spec_with("gpu", host_path)), "0.5.0");
        let mut annotated = spec_with("gpu", env());
        annotated.devices[0]
            .annotations
            .insert("k".into(), "v".into());
        assert_eq!(minimum_version(&annotated), "0.6.0");
        let mut dotted = spec_with("gpu", env());
        dotted.kind = "vendor.com/dev.x".into();
        assert_eq!(minimum_version(&dotted), "0.6.0");
        let gids = ContainerEdits {
            additional_gids: vec![5],
            ..Default::default()
        };
        assert_eq!(minimum_version(&spec_with("0", gids)), "0.7.0");
        let rdt = ContainerEdits {
            intel_rdt: Some(IntelRdt::default()),
            ..Default::default()
        };
        assert_eq!(minimum_version(&spec_with("gpu", rdt)), "0.7.0");
        let rdt11 = ContainerEdits {
            intel_rdt: Some(IntelRdt {
                enable_monitoring: true,
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(minimum_version(&spec_with("gpu", rdt11)), "1.1.0");
        let net = ContainerEdits {
            net_devices: vec![NetDevice {
                host_interface_name: "eth1".into(),
                name: "eth0".into(),
            }],
            ..Default::default()
        };
        let mut spec = spec_with("gpu", env());
        spec.container_edits = net;
        assert_eq!(minimum_version_reason(&spec), ("1.1.0", "netDevices"));
    }
}
