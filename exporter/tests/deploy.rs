//! `deploy/kubernetes/exporter` against the exporter: the DaemonSet's args are flags the exporter
//! accepts (its own parser), they point at the mounts of the right host paths (NVML only from the
//! host's driver root, the host's /proc, containerd's socket), and the Service and the probe use
//! the :9400 the exporter listens on. (The schema check of every manifest, kubernetes-validate,
//! is `tests/tests/deploy_manifests.rs`.)
// Test support: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use clap::Parser;
use gpuhook_exporter::cli::Args;
use serde::Deserialize;
use yaml_serde::Value;

fn docs(file: &str) -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/kubernetes/exporter")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    yaml_serde::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

fn mount_of(pod: &Value, host: &str) -> String {
    let vol = pod["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|v| v["hostPath"]["path"] == host)
        .unwrap();
    let m = pod["containers"][0]["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|m| m["name"] == vol["name"])
        .unwrap();
    assert_eq!(
        m["readOnly"].as_bool(),
        Some(true),
        "{host} must be read-only"
    );
    m["mountPath"].as_str().unwrap().to_string()
}

#[test]
fn daemonset_args_are_exporter_flags_on_the_right_mounts_and_port() {
    let ds = docs("daemonset.yaml")
        .into_iter()
        .find(|d| d["kind"] == "DaemonSet")
        .unwrap();
    let pod = &ds["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    assert_eq!(
        c["command"][0].as_str(),
        Some("/opt/gpuhook/bin/gpuhook-exporter")
    );
    let mut argv = vec!["gpuhook-exporter".to_string()];
    argv.extend(
        c["args"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_string()),
    );
    let args = Args::try_parse_from(&argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    assert!(args.kubernetes);
    assert_eq!(args.driver_root, Path::new(&mount_of(pod, "/")));
    assert_eq!(args.proc_root, Path::new(&mount_of(pod, "/proc")));
    assert!(args
        .cri_socket
        .starts_with(mount_of(pod, "/run/containerd")));
    assert_eq!(args.listen().unwrap().port(), 9400);
    assert_eq!(c["ports"][0]["containerPort"].as_u64(), Some(9400));
    assert_eq!(c["ports"][0]["name"].as_str(), Some("metrics"));
    assert_eq!(
        c["livenessProbe"]["httpGet"]["path"].as_str(),
        Some("/health")
    );
    assert_eq!(pod["automountServiceAccountToken"].as_bool(), Some(false));

    let svc = docs("service.yaml")
        .into_iter()
        .find(|d| d["kind"] == "Service")
        .unwrap();
    assert_eq!(svc["spec"]["ports"][0]["port"].as_u64(), Some(9400));
    assert_eq!(
        svc["spec"]["ports"][0]["targetPort"].as_str(),
        Some("metrics")
    );
    assert_eq!(
        svc["spec"]["selector"],
        ds["spec"]["selector"]["matchLabels"]
    );
}
