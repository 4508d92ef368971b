//! `tests/expectations/nvidia-ctk/*.json` (NVIDIA nvidia-ctk v1.20's specs for the reference
//! profiles, normalised by `scripts/compare-nvidia-ctk.sh --write-expectations`) stay in step with
//! the profiles: every profile has one, and NVIDIA's device names and GPU nodes are the ones its
//! documented rules give for the profile — names by index (`0`, MIG `0:1`) and UUID plus `all`, a
//! MIG-enabled GPU only through its MIG devices, each device on `/dev/nvidia<minor>` (the device
//! minor, not the NVML index), MIG caps read-only. A profile edit without a re-run of the script
//! fails here. No root needed.

// Integration tests: a failed unwrap or expect is the test failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

use gpuhook_sim::{builtin_names, NodeProfile};
use serde_json::Value;

fn expectation(dir: &str, profile: &str) -> Value {
    let path = gpuhook_e2e::workspace_root()
        .join("tests/expectations/nvidia-ctk")
        .join(dir)
        .join(format!("{profile}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}: run scripts/compare-nvidia-ctk.sh --write-expectations",
            path.display()
        )
    });
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn names(v: &Value) -> BTreeSet<String> {
    v["devices"]
        .as_object()
        .expect("devices")
        .keys()
        .cloned()
        .collect()
}

fn nodes<'a>(v: &'a Value, device: &str) -> Vec<&'a str> {
    v["devices"][device]
        .as_array()
        .unwrap_or_else(|| panic!("device {device}"))
        .iter()
        .map(|n| n.as_str().expect("node string"))
        .collect()
}

#[test]
fn nvidia_device_set_follows_the_profiles() {
    for name in builtin_names() {
        let p = NodeProfile::builtin(name).unwrap();
        let v = expectation("", name);
        assert_eq!(v["profile"], name);
        let no_devices = p
            .gpus
            .iter()
            .all(|g| g.mig_mode && g.mig_devices.is_empty());
        if no_devices {
            assert!(
                v["error"].as_str().is_some_and(|e| e.contains("all")),
                "{name}: {v}"
            );
            continue;
        }
        let mut want = BTreeSet::from(["all".to_string()]);
        for g in &p.gpus {
            if !g.mig_mode {
                want.extend([g.index.to_string(), g.uuid.clone()]);
                let gpu_node = format!("/dev/nvidia{} 195:{} mode=0666", g.minor, g.minor);
                assert!(
                    nodes(&v, &g.index.to_string())[0].starts_with(&gpu_node),
                    "{name} GPU {}",
                    g.index
                );
            }
            for (j, m) in g.mig_devices.iter().enumerate() {
                want.extend([format!("{}:{j}", g.index), m.uuid.clone()]);
                let caps: Vec<&str> = nodes(&v, &m.uuid)
                    .into_iter()
                    .filter(|n| n.starts_with("/dev/nvidia-caps/"))
                    .collect();
                let minors = [m.gi_cap_minor, m.ci_cap_minor];
                assert_eq!(caps.len(), 2, "{name} {}: {caps:?}", m.uuid);
                for (n, minor) in caps.iter().zip(minors) {
                    assert!(
                        n.contains(&format!(":{minor} mode=0444")),
                        "{name} {}: {n}",
                        m.uuid
                    );
                }
            }
        }
        assert_eq!(names(&v), want, "{name}");
    }
}

#[test]
fn management_mode_has_one_all_device_with_every_node() {
    for name in builtin_names() {
        let p = NodeProfile::builtin(name).unwrap();
        let v = expectation("management", name);
        assert_eq!(names(&v), BTreeSet::from(["all".to_string()]), "{name}");
        let all = nodes(&v, "all");
        for g in &p.gpus {
            assert!(
                all.iter()
                    .any(|n| n.starts_with(&format!("/dev/nvidia{} ", g.minor))),
                "{name}"
            );
        }
        assert!(
            all.iter()
                .any(|n| n.starts_with("/dev/nvidia-caps/nvidia-cap1 ") && n.contains("mode=0400")),
            "{name}"
        );
        assert_eq!(
            all.iter().any(|n| n.starts_with("/dev/nvidia-modeset ")),
            p.features.nvidia_modeset,
            "{name}: nvidia-modeset only where the node has it"
        );
    }
}
