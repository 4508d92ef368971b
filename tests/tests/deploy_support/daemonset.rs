//! The DaemonSets of the example against the daemon's command line, the ConfigMap and the pod
//! conventions: one check per concern, called by `daemonsets_agree_with_the_daemon_and_the_configmap`.

use std::path::Path;

use gpu_mps_daemon::cli::RunArgs;
use gpu_mps_daemon::config::DEFAULT_MPS_ROOT;
use gpu_mps_daemon::plan::Timing;
use yaml_serde::Value;

use super::{get, named, s, seq};

/// Pod-level settings: selector labels on the template, service account, host PID, priority,
/// GPU node selection and toleration, and a grace period longer than the daemon's shutdown.
pub fn check_pod(name: &str, ds: &Value, sa: &str) {
    let pod = get(ds, &["spec", "template", "spec"]);
    let defaults = Timing::default();
    let selector = get(ds, &["spec", "selector", "matchLabels"])
        .as_mapping()
        .unwrap();
    let labels = get(ds, &["spec", "template", "metadata", "labels"])
        .as_mapping()
        .unwrap();
    for (k, v) in selector {
        assert_eq!(
            labels.get(k),
            Some(v),
            "{name}: selector label {k:?} not on the pod template"
        );
    }
    assert_eq!(s(pod, &["serviceAccountName"]), sa, "{name}");
    assert_eq!(get(pod, &["hostPID"]).as_bool(), Some(true), "{name}");
    assert_eq!(
        s(pod, &["priorityClassName"]),
        "system-node-critical",
        "{name}"
    );
    assert_eq!(
        s(pod, &["nodeSelector", "nvidia.com/gpu.present"]),
        "true",
        "{name}"
    );
    assert!(
        seq(pod, &["tolerations"])
            .iter()
            .any(|t| t.get("key").and_then(Value::as_str) == Some("nvidia.com/gpu")),
        "{name}: must tolerate the nvidia.com/gpu taint"
    );
    // kubelet must wait longer than the daemon's own bounded shutdown of a control daemon.
    let grace = get(pod, &["terminationGracePeriodSeconds"])
        .as_u64()
        .unwrap();
    assert!(
        grace > (defaults.shutdown_timeout + defaults.command_timeout).as_secs(),
        "{name}"
    );
}

/// `--config` points at the ConfigMap key selected by the node label. Returns that key.
pub fn check_config_mount<'a>(
    name: &str,
    pod: &Value,
    cm: &Value,
    args: &RunArgs,
    mounts: &[Value],
    volumes: &'a [Value],
) -> &'a str {
    let cfg_path = args.config.clone().expect("--config");
    let cfg_mount = named(mounts, "config");
    assert_eq!(
        Path::new(s(cfg_mount, &["mountPath"])),
        cfg_path.parent().unwrap(),
        "{name}"
    );
    assert!(
        cfg_mount.get("subPath").is_none(),
        "{name}: subPath mounts never see ConfigMap updates"
    );
    let cfg_vol = get(named(volumes, "config"), &["configMap"]);
    assert_eq!(
        s(cfg_vol, &["name"]),
        s(cm, &["metadata", "name"]),
        "{name}"
    );
    let items = seq(cfg_vol, &["items"]);
    assert_eq!(items.len(), 1);
    assert_eq!(
        Path::new(s(&items[0], &["path"])),
        Path::new(cfg_path.file_name().unwrap()),
        "{name}"
    );
    let key = s(&items[0], &["key"]);
    assert!(
        get(cm, &["data"]).get(key).is_some(),
        "{name}: ConfigMap has no key {key}"
    );
    assert_eq!(
        format!(
            "{}.yaml",
            s(pod, &["nodeSelector", "gpuhook.io/mps-config"])
        ),
        key,
        "{name}"
    );
    key
}

/// The MPS root (the daemon's default, same path inside and out, tmpfs mounts propagate) and the
/// read-only driver root the flag names.
pub fn check_host_mounts(name: &str, args: &RunArgs, mounts: &[Value], volumes: &[Value]) {
    let root_mount = named(mounts, "mps-root");
    assert_eq!(s(root_mount, &["mountPath"]), DEFAULT_MPS_ROOT, "{name}");
    assert_eq!(
        s(root_mount, &["mountPropagation"]),
        "Bidirectional",
        "{name}"
    );
    assert_eq!(
        s(named(volumes, "mps-root"), &["hostPath", "path"]),
        DEFAULT_MPS_ROOT,
        "{name}"
    );
    assert!(args.mps_root.is_none(), "{name}: keep the default MPS root");

    // The driver root flag names the read-only host mount.
    let drv = named(mounts, "driver-root");
    assert_eq!(
        args.driver_root.as_deref(),
        Some(Path::new(s(drv, &["mountPath"]))),
        "{name}"
    );
    assert_eq!(get(drv, &["readOnly"]).as_bool(), Some(true), "{name}");
    assert_eq!(
        s(named(volumes, "driver-root"), &["hostPath", "path"]),
        "/",
        "{name}"
    );
    assert_eq!(
        s(named(mounts, "cdi"), &["mountPath"]),
        "/var/run/cdi",
        "{name}"
    );
    check_cri_socket(name, args, mounts, volumes);
}

/// `--cri-socket` is containerd's default socket (`/run/containerd/containerd.sock`, containerd
/// `defaults.DefaultAddress`) seen through a read-only mount of its host directory.
fn check_cri_socket(name: &str, args: &RunArgs, mounts: &[Value], volumes: &[Value]) {
    let sock = args.cri_socket.as_deref().expect("--cri-socket");
    let m = named(mounts, "host-containerd");
    let rel = sock
        .strip_prefix(s(m, &["mountPath"]))
        .unwrap_or_else(|_| panic!("{name}: {} is not under the mount", sock.display()));
    assert_eq!(get(m, &["readOnly"]).as_bool(), Some(true), "{name}");
    assert_eq!(s(m, &["mountPropagation"]), "HostToContainer", "{name}");
    let host = Path::new(s(named(volumes, "host-containerd"), &["hostPath", "path"])).join(rel);
    assert_eq!(host, Path::new("/run/containerd/containerd.sock"), "{name}");
}

/// Probes hit the daemon's listener, on paths the daemon serves.
pub fn check_probes(name: &str, ds: &Value, c: &Value, args: &RunArgs) {
    let listen = args.listen.expect("--listen");
    let port = named(seq(c, &["ports"]), "metrics");
    assert_eq!(
        get(port, &["containerPort"]).as_u64(),
        Some(u64::from(listen.port())),
        "{name}"
    );
    let annotations = get(ds, &["spec", "template", "metadata", "annotations"]);
    assert_eq!(
        s(annotations, &["prometheus.io/port"]),
        listen.port().to_string(),
        "{name}"
    );
    let board = gpu_mps_daemon::status::Board::default();
    let path = s(annotations, &["prometheus.io/path"]);
    let resp = gpu_mps_daemon::http::route(&board, &format!("GET {path} HTTP/1.1"));
    assert_eq!(
        resp.code, 200,
        "{name}: the scrape path {path} must be served"
    );
    for (probe, path) in [("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")] {
        let get_ = get(c, &[probe, "httpGet"]);
        assert_eq!(s(get_, &["path"]), path, "{name} {probe}");
        assert_eq!(s(get_, &["port"]), "metrics", "{name} {probe}");
        let resp = gpu_mps_daemon::http::route(&board, &format!("GET {path} HTTP/1.1"));
        assert_ne!(resp.code, 404, "the daemon does not serve {path}");
    }
}
