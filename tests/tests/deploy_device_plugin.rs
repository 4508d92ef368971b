//! The device plugin's Kubernetes manifests (`deploy/kubernetes/device-plugin`, the overlays
//! `examples/device-plugin` and `examples/device-plugin-mps`) rendered with `kubectl kustomize`
//! and checked against the binary and against what the plugin needs: every arg the DaemonSet
//! passes is accepted by `gpuhook-device-plugin` (clap refuses an unknown flag before `--help`),
//! the flags' paths are the mounts of the right host paths, the RBAC is exactly read access to
//! Nodes, every ConfigMap key is a config the plugin accepts (`dry-run` on a simulated L20), and
//! the MPS overlay deploys the plugin beside gpu-mps-daemon with the same MPS root.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test crate: a panic is a test failure

#[path = "deploy_support/kustomized.rs"]
mod kustomized;

use std::path::Path;
use std::process::Command;

use gpuhook_node::{DeviceMajors, DiscoverySource, DriverFiles, Gpu, Inventory};
use yaml_serde::Value;

use kustomized::{count, find, rendered, strs};

const PLUGIN: &str = "gpuhook-device-plugin";
const NS: &str = "gpuhook-system";

/// The value after `flag` in `args`.
fn flag<'a>(args: &'a [String], flag: &str) -> &'a str {
    let i = args
        .iter()
        .position(|a| a == flag)
        .unwrap_or_else(|| panic!("no {flag}"));
    &args[i + 1]
}

/// The mount path of the volume whose source `pred` accepts.
fn mount_of(pod: &Value, pred: impl Fn(&Value) -> bool) -> String {
    let vol = pod["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|v| pred(v))
        .expect("volume");
    let c = &pod["containers"][0];
    let m = c["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|m| m["name"] == vol["name"])
        .expect("mount of the volume");
    m["mountPath"].as_str().unwrap().to_string()
}

fn host_path(p: &'static str) -> impl Fn(&Value) -> bool {
    move |v: &Value| v["hostPath"]["path"] == p
}

fn ready() -> bool {
    gpuhook_e2e::e2e_ready("deploy_device_plugin", &["kubectl"])
}

#[test]
fn daemonset_args_are_flags_the_plugin_accepts_on_the_right_mounts() {
    if !ready() {
        return;
    }
    let bin = gpuhook_e2e::built(PLUGIN);
    // The check can fail: an unknown flag before --help is refused.
    let bad = Command::new(&bin)
        .args(["serve", "--no-such-flag", "--help"])
        .output()
        .unwrap();
    assert!(
        !bad.status.success(),
        "clap must refuse unknown flags before --help"
    );
    for overlay in ["examples/device-plugin", "examples/device-plugin-mps"] {
        let docs = rendered(overlay);
        let pod = &find(&docs, "DaemonSet", PLUGIN)["spec"]["template"]["spec"];
        let c = &pod["containers"][0];
        assert_eq!(
            strs(&c["command"]),
            ["/opt/gpuhook/bin/gpuhook-device-plugin"]
        );
        let args = strs(&c["args"]);
        let out = Command::new(&bin)
            .args(&args)
            .arg("--help")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{overlay}: {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let plugin_dir = "/var/lib/kubelet/device-plugins";
        assert_eq!(flag(&args, "--plugin-dir"), plugin_dir);
        assert_eq!(mount_of(pod, host_path(plugin_dir)), plugin_dir);
        assert_eq!(flag(&args, "--driver-root"), mount_of(pod, host_path("/")));
        let cfg = mount_of(pod, |v| {
            v["configMap"]["name"] == "gpuhook-device-plugin-config"
        });
        assert_eq!(flag(&args, "--config"), cfg);
        assert_eq!(pod["nodeSelector"]["nvidia.com/gpu.present"], "true");
        assert!(pod["tolerations"]
            .as_sequence()
            .unwrap()
            .iter()
            .any(|t| t["key"] == "nvidia.com/gpu"));
        assert_eq!(
            pod["runtimeClassName"], "gpuhook",
            "GPUs through gpuhook-runtime"
        );
        assert!(
            c["securityContext"]["privileged"].is_null(),
            "not privileged"
        );
    }
}

#[test]
fn rbac_is_read_access_to_nodes_only() {
    if !ready() {
        return;
    }
    for overlay in ["examples/device-plugin", "examples/device-plugin-mps"] {
        let docs = rendered(overlay);
        assert_eq!(
            (count(&docs, "Role"), count(&docs, "RoleBinding")),
            (0, 0),
            "{overlay}"
        );
        assert_eq!(count(&docs, "ClusterRole"), 1, "{overlay}");
        let role = find(&docs, "ClusterRole", PLUGIN);
        let want: Value = yaml_serde::from_str(
            "- apiGroups: [\"\"]\n  resources: [nodes]\n  verbs: [get, list, watch]\n",
        )
        .unwrap();
        assert_eq!(role["rules"], want, "{overlay}");
        let binding = find(&docs, "ClusterRoleBinding", PLUGIN);
        assert_eq!(binding["roleRef"]["name"], PLUGIN);
        let subjects = binding["subjects"].as_sequence().unwrap();
        assert_eq!(subjects.len(), 1);
        assert_eq!(
            (subjects[0]["kind"].as_str(), subjects[0]["name"].as_str()),
            (Some("ServiceAccount"), Some(PLUGIN))
        );
        assert_eq!(subjects[0]["namespace"], NS);
        let pod = &find(&docs, "DaemonSet", PLUGIN)["spec"]["template"]["spec"];
        assert_eq!(pod["serviceAccountName"], PLUGIN);
        assert_eq!(
            find(&docs, "ServiceAccount", PLUGIN)["metadata"]["namespace"],
            NS
        );
    }
}

/// One L20 (the seed's node) as the plugin would discover it.
fn l20_inventory() -> Inventory {
    Inventory {
        format_version: gpuhook_node::INVENTORY_FORMAT_VERSION,
        driver_root: "/".into(),
        dev_root: "/".into(),
        driver_version: "570.158.01".into(),
        cuda_driver_version: Some("12.8".into()),
        majors: DeviceMajors {
            nvidia: 195,
            nvidia_uvm: Some(510),
            nvidia_caps: None,
            nvidia_caps_imex_channels: None,
        },
        gpus: vec![Gpu {
            index: 0,
            minor: 0,
            uuid: "GPU-e6c1ce30-955f-10af-95b1-0a37b420ba76".into(),
            pci_bus_id: "00000000:10:00.0".into(),
            name: "NVIDIA L20".into(),
            memory_mib: 46068,
            architecture: None,
            compute_capability: None,
            brand: None,
            mig_enabled: false,
            mig_devices: vec![],
        }],
        mig_caps: None,
        files: DriverFiles::default(),
        source: DiscoverySource::Nvml,
    }
}

/// Writes the ConfigMap's keys as its volume does (one file per key); returns the keys.
fn configmap_dir(cm: &Value, dir: &Path) -> Vec<String> {
    let mut keys = Vec::new();
    for (k, v) in cm["data"].as_mapping().unwrap() {
        let k = k.as_str().unwrap();
        std::fs::write(dir.join(k), v.as_str().unwrap()).unwrap();
        keys.push(k.to_string());
    }
    keys
}

#[test]
fn every_configmap_key_is_a_config_the_plugin_accepts_and_mps_roots_agree() {
    if !ready() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let inv = tmp.path().join("inventory.json");
    std::fs::write(&inv, serde_json::to_string(&l20_inventory()).unwrap()).unwrap();
    for (overlay, want) in [
        ("examples/device-plugin", vec!["default", "l20", "t4"]),
        ("examples/device-plugin-mps", vec!["default", "l20", "t4"]),
    ] {
        let docs = rendered(overlay);
        let dir = tmp.path().join(overlay.replace('/', "-"));
        std::fs::create_dir_all(&dir).unwrap();
        let keys = configmap_dir(
            find(&docs, "ConfigMap", "gpuhook-device-plugin-config"),
            &dir,
        );
        assert_eq!(keys, want, "{overlay}");
        for key in &keys {
            let out = Command::new(gpuhook_e2e::built(PLUGIN))
                .args(["dry-run", "--config"])
                .arg(&dir)
                .args(["--config-name", key, "--inventory"])
                .arg(&inv)
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "{overlay} {key}: {text}\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            if overlay == "examples/device-plugin" && key == "l20" {
                assert!(
                    text.contains("::7") && !text.contains("::8"),
                    "8 replicas: {text}"
                );
            }
        }
    }
    // The MPS overlay: the plugin beside both MPS daemons, reading the root they write.
    let docs = rendered("examples/device-plugin-mps");
    let plugin = &find(&docs, "DaemonSet", PLUGIN)["spec"]["template"]["spec"];
    for ds in ["gpu-mps-daemon-l20", "gpu-mps-daemon-t4"] {
        let pod = &find(&docs, "DaemonSet", ds)["spec"]["template"]["spec"];
        assert!(
            pod["volumes"]
                .as_sequence()
                .unwrap()
                .iter()
                .any(host_path("/run/gpuhook/mps")),
            "{ds}"
        );
    }
    assert_eq!(
        mount_of(plugin, host_path("/run/gpuhook/mps")),
        "/run/gpuhook/mps"
    );
    let cm = find(&docs, "ConfigMap", "gpuhook-device-plugin-config");
    for key in ["l20", "t4"] {
        let cfg: Value = yaml_serde::from_str(cm["data"][key].as_str().unwrap()).unwrap();
        assert_eq!(cfg["flags"]["mpsRoot"], "/run/gpuhook/mps", "{key}");
        assert!(!cfg["sharing"]["mps"].is_null(), "{key}");
    }
}
