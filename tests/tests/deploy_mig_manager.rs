//! The MIG manager's Kubernetes manifests (`deploy/kubernetes/mig-manager`, the overlay
//! `examples/mig-manager`) rendered with `kubectl kustomize` and checked against the binary and
//! what it needs: the container's args are accepted by `gpuhook-mig-manager`'s own parser, its
//! paths are the mounts of the right host paths and of the ConfigMap, the RBAC is exactly
//! get/patch on Nodes and create on Events, the pod sees host processes, every config of the
//! ConfigMap parses and plans on the simulated A100 pair, and gpuhook's device plugin is paused
//! by the label the manager pauses.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "deploy_support/kustomized.rs"]
mod kustomized;

use clap::Parser;
use gpuhook_mig::MigConfigFile;
use gpuhook_mig_manager::cli::Args;
use gpuhook_mig_manager::labels::{CLIENTS, PAUSED};
use serde::Deserialize;
use yaml_serde::Value;

use kustomized::{find, rendered, strs};

const NAME: &str = "gpuhook-mig-manager";
const NS: &str = "gpuhook-system";

/// The mount path of volume `name` in container `c`.
fn mount<'a>(c: &'a Value, name: &str) -> &'a str {
    c["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|m| m["name"] == name)
        .and_then(|m| m["mountPath"].as_str())
        .unwrap_or_else(|| panic!("no mount of {name}"))
}

fn rules(role: &Value) -> Vec<(Vec<String>, Vec<String>)> {
    role["rules"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|r| (strs(&r["resources"]), strs(&r["verbs"])))
        .collect()
}

#[test]
fn rbac_is_node_get_patch_and_events_create_only() {
    if !gpuhook_e2e::e2e_ready("deploy_mig_manager", &["kubectl"]) {
        return;
    }
    let docs = rendered("examples/mig-manager");
    let cr = find(&docs, "ClusterRole", NAME);
    assert_eq!(
        rules(cr),
        [(vec!["nodes".into()], vec!["get".into(), "patch".into()])]
    );
    let role = find(&docs, "Role", "gpuhook-mig-manager-events");
    assert_eq!(role["metadata"]["namespace"], NS);
    assert_eq!(
        rules(role),
        [(vec!["events".into()], vec!["create".into()])]
    );
    for (kind, name) in [
        ("ClusterRoleBinding", NAME),
        ("RoleBinding", "gpuhook-mig-manager-events"),
    ] {
        let b = find(&docs, kind, name);
        assert_eq!(b["subjects"][0]["name"], NAME, "{kind}");
        assert_eq!(b["subjects"][0]["namespace"], NS, "{kind}");
    }
}

#[test]
fn daemonset_args_parse_and_name_the_mounts() {
    if !gpuhook_e2e::e2e_ready("deploy_mig_manager", &["kubectl"]) {
        return;
    }
    let docs = rendered("examples/mig-manager");
    let ds = find(&docs, "DaemonSet", NAME);
    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(
        pod["hostPID"].as_bool(),
        Some(true),
        "clients are found as host processes"
    );
    assert_eq!(pod["serviceAccountName"], NAME);
    assert_eq!(pod["nodeSelector"]["nvidia.com/gpu.present"], "true");
    let c = &pod["containers"][0];
    let mut argv = strs(&c["command"]);
    argv.extend(strs(&c["args"]));
    argv.extend(["--node-name".into(), "n".into()]);
    let args = Args::try_parse_from(&argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    let env: Vec<String> = c["env"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect();
    assert!(env.contains(&"NODE_NAME".to_string()) && env.contains(&"POD_NAMESPACE".to_string()));
    // The config file is the ConfigMap's key; the driver and host roots are the host's /.
    let cfg_mount = mount(c, "mig-parted-config");
    assert!(
        args.config_file.starts_with(cfg_mount),
        "{:?}",
        args.config_file
    );
    let cm_name = pod["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "mig-parted-config")
        .unwrap()["configMap"]["name"]
        .as_str()
        .unwrap();
    let key = args.config_file.file_name().unwrap().to_str().unwrap();
    let cm = find(&docs, "ConfigMap", cm_name);
    let text = cm["data"][key].as_str().expect("the ConfigMap has the key");
    let file = MigConfigFile::parse(text.as_bytes(), key).unwrap();
    for name in ["all-disabled", "mixed-workload", "all-small", "all-1g.10gb"] {
        file.config(name).unwrap();
    }
    let host = mount(c, "host-root");
    assert_eq!(args.driver_root.to_str(), Some(host));
    assert_eq!(
        args.host_root.as_deref().and_then(|p| p.to_str()),
        Some(host)
    );
    let hv = pod["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "host-root")
        .unwrap();
    assert_eq!(hv["hostPath"]["path"], "/");
    // The CDI refresh is the gpuhook the node installer installs.
    assert_eq!(
        args.cdi_refresh.as_deref().and_then(|p| p.to_str()),
        Some("/usr/local/nvidia-gpuhook/bin/gpuhook")
    );
    assert_eq!(args.cdi_refresh_arg, ["cdi", "generate"]);
    // Holders: the kubelet's pod-resources socket and gpu-mps-daemon's root at their host paths
    // under the host root; a held device is kept unless DRAIN is set.
    let under_host = |p: &str| std::path::Path::new(host).join(p.trim_start_matches('/'));
    assert_eq!(
        args.pod_resources_socket,
        under_host(gpuhook_device_plugin::podresources::POD_RESOURCES_SOCKET)
    );
    assert_eq!(
        args.mps_root,
        under_host(gpu_mps_daemon::config::DEFAULT_MPS_ROOT)
    );
    assert!(!args.drain, "held devices are kept by default");
}

#[test]
fn the_device_plugin_leaves_while_the_manager_pauses_it() {
    if !gpuhook_e2e::e2e_ready("deploy_mig_manager", &["kubectl"]) {
        return;
    }
    let docs = rendered("examples/mig-manager");
    let ds = find(&docs, "DaemonSet", "gpuhook-device-plugin");
    let terms = &ds["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
        ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"];
    let expr = &terms[0]["matchExpressions"][0];
    let label = expr["key"].as_str().unwrap();
    assert!(
        CLIENTS.iter().any(|c| c.label == label),
        "{label} is a label the manager pauses"
    );
    assert_eq!(expr["operator"], "NotIn");
    assert!(strs(&expr["values"]).contains(&PAUSED.to_string()));
}

/// gpu-mps-daemon's example DaemonSets leave a node while the manager pauses the label it pauses
/// for the MPS daemon (as the device plugin's does), and stay off where it is "false".
#[test]
fn the_mps_daemon_leaves_while_the_manager_pauses_it() {
    let path =
        gpuhook_e2e::workspace_root().join("deploy/kubernetes/examples/l20-t4/gpu-mps-daemon.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let docs: Vec<Value> = yaml_serde::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap())
        .filter(|v| !v.is_null())
        .collect();
    let mps_label = CLIENTS
        .iter()
        .find(|c| c.processes.contains(&"gpu-mps-daemon"))
        .expect("the manager pauses gpu-mps-daemon")
        .label;
    let daemonsets: Vec<&Value> = docs.iter().filter(|d| d["kind"] == "DaemonSet").collect();
    assert_eq!(daemonsets.len(), 2);
    for ds in daemonsets {
        let terms = &ds["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
            ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"];
        let exprs = terms[0]["matchExpressions"].as_sequence().unwrap();
        let expr = exprs
            .iter()
            .find(|e| e["key"] == mps_label)
            .unwrap_or_else(|| panic!("{:?}: no affinity on {mps_label}", ds["metadata"]["name"]));
        assert_eq!(expr["operator"], "NotIn");
        let values = strs(&expr["values"]);
        assert!(values.contains(&PAUSED.to_string()) && values.contains(&"false".to_string()));
    }
}
