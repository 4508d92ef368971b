//! The systemd unit and its example config (`deploy/systemd/`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use clap::Parser;
use gpu_mps_daemon::cli::Cli;
use gpu_mps_daemon::config::{self, DEFAULT_MPS_ROOT};
use gpu_mps_daemon::plan::Timing;

use gpu_mps_daemon::plan::Overrides;

use super::cdi::installed_gpuhook;
use super::{check_device_plugin_shape, read, resolve, resolve_plan, root};

/// `[Section]` -> list of (key, value), as systemd reads a unit file (comments, blank lines and
/// backslash continuations handled; repeated keys kept in order).
fn parse_unit(text: &str) -> BTreeMap<String, Vec<(String, String)>> {
    let mut out: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    let mut section = String::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let mut line = line.trim().to_string();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        while line.ends_with('\\') {
            line.pop();
            line.push(' ');
            line.push_str(lines.next().unwrap_or("").trim());
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.to_string();
            continue;
        }
        let (k, v) = line
            .split_once('=')
            .unwrap_or_else(|| panic!("not key=value: {line}"));
        assert!(!section.is_empty(), "{k} outside a section");
        out.entry(section.clone())
            .or_default()
            .push((k.trim().to_string(), v.trim().to_string()));
    }
    out
}

fn unit_value<'a>(
    unit: &'a BTreeMap<String, Vec<(String, String)>>,
    section: &str,
    key: &str,
) -> &'a str {
    let entries = unit
        .get(section)
        .unwrap_or_else(|| panic!("no [{section}]"));
    let found: Vec<&str> = entries
        .iter()
        .filter(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(found.len(), 1, "[{section}] {key} must be set exactly once");
    found[0]
}

fn systemd_unit_path() -> PathBuf {
    root().join("deploy/systemd/gpu-mps-daemon.service")
}

/// Each of these gives the service a private mount namespace (or hides /dev/nvidia*): the shm
/// tmpfs the daemon mounts would then never reach the host and its containers.
const MOUNT_BREAKING_KEYS: [&str; 14] = [
    "ProtectSystem",
    "ProtectHome",
    "PrivateTmp",
    "PrivateDevices",
    "PrivateMounts",
    "ReadWritePaths",
    "ReadOnlyPaths",
    "InaccessiblePaths",
    "ProtectKernelModules",
    "ProtectKernelTunables",
    "ProtectControlGroups",
    "DevicePolicy",
    "DeviceAllow",
    "MountFlags",
];

#[test]
fn systemd_unit_runs_the_daemon_the_way_it_expects() {
    let unit = parse_unit(&read(&systemd_unit_path()));
    let v = |sec: &str, key: &str| unit_value(&unit, sec, key).to_string();
    assert!(v("Unit", "After")
        .split_whitespace()
        .any(|u| u == "nvidia-persistenced.service"));
    // The daemon does not call sd_notify; Type=notify would make every start time out.
    assert_eq!(v("Service", "Type"), "simple");
    assert_eq!(v("Service", "ExecReload"), "/bin/kill -HUP $MAINPID");
    assert_eq!(v("Service", "KillSignal"), "SIGTERM");
    assert_eq!(
        v("Service", "KillMode"),
        "mixed",
        "SIGTERM must reach the daemon only"
    );
    assert_eq!(v("Service", "Restart"), "on-failure");
    assert_eq!(v("Install", "WantedBy"), "multi-user.target");
    let stop = v("Service", "TimeoutStopSec");
    let stop = config::parse_duration(&stop).unwrap_or_else(|| panic!("TimeoutStopSec={stop}"));
    let t = Timing::default();
    assert!(
        stop > t.shutdown_timeout + t.command_timeout,
        "TimeoutStopSec below the daemon's own shutdown bound"
    );
    let caps = v("Service", "CapabilityBoundingSet");
    for cap in ["CAP_SYS_ADMIN", "CAP_SETUID", "CAP_SETGID"] {
        assert!(
            caps.split_whitespace().any(|c| c == cap),
            "{cap} is needed (see the unit's comments)"
        );
    }
    assert!(v("Service", "RestrictNamespaces")
        .split_whitespace()
        .any(|n| n == "mnt"));
    for key in MOUNT_BREAKING_KEYS {
        assert!(
            !unit["Service"].iter().any(|(k, _)| k == key),
            "{key}= would break the shared shm tmpfs or the GPU devices"
        );
    }

    let exec = v("Service", "ExecStart");
    let argv: Vec<&str> = exec.split_whitespace().collect();
    assert_eq!(argv[0], "/usr/local/bin/gpu-mps-daemon");
    let cli =
        Cli::try_parse_from(&argv).unwrap_or_else(|e| panic!("gpu-mps-daemon rejects {exec}: {e}"));
    assert!(cli.command.is_none());
    assert_eq!(
        cli.run.config.as_deref(),
        Some(Path::new("/etc/gpuhook/mps.yaml"))
    );
    assert!(
        cli.run.listen.is_some_and(|a| a.ip().is_loopback()),
        "keep the HTTP listener local"
    );

    // RuntimeDirectory= is relative to /run and must be the example config's MPS root.
    let cfg =
        config::parse(&read(&root().join("deploy/systemd/mps.yaml"))).expect("mps.yaml parses");
    let runtime_dir = Path::new("/run").join(v("Service", "RuntimeDirectory"));
    assert_eq!(
        cfg.mps_daemon.mps_root.as_deref(),
        Some(runtime_dir.as_path())
    );
    assert_eq!(runtime_dir, Path::new(DEFAULT_MPS_ROOT));
}

#[test]
fn systemd_example_config_resolves_on_the_simulated_nodes() {
    let text = read(&root().join("deploy/systemd/mps.yaml"));
    check_device_plugin_shape(&text, 4);
    // The example's comment promises 25 % and these memory limits per client.
    for (profile, limit) in [("l20", 11517), ("t4", 3840)] {
        let gpus = resolve(&text, profile);
        assert_eq!(gpus.len(), 1);
        assert_eq!(gpus[0].active_thread_percentage, 25, "{profile}");
        assert_eq!(gpus[0].pinned_memory_limit_mib, Some(limit), "{profile}");
        assert!(
            text.contains(&format!("{limit} MiB")),
            "mps.yaml comments must state {limit} MiB"
        );
        assert_eq!(gpus[0].driver_root, Path::new("/"));
    }
    assert!(text.contains("25 %"));
    // The CDI spec it writes: host paths (the daemon runs on the host), hooks running the
    // gpuhook that containerd/README.md installs, clients watched through the host's /proc and
    // cgroup file system.
    let plan = resolve_plan(&text, "l20", &Overrides::default());
    assert_eq!(plan.cdi.gpuhook_path, installed_gpuhook());
    assert_eq!(plan.cdi.host_driver_root.as_deref(), Some(Path::new("/")));
    assert_eq!(plan.cdi.spec_dir, Path::new("/var/run/cdi"));
    assert_eq!(plan.enforce.proc_root, Path::new("/proc"));
    assert_eq!(plan.enforce.cgroup_root, Path::new("/sys/fs/cgroup"));
    assert_eq!(plan.enforce.max_clients_per_container, None);
}

#[test]
fn systemd_unit_passes_systemd_analyze_verify() {
    if !gpuhook_e2e::e2e_ready("deploy_manifests", &["systemd-analyze"]) {
        return;
    }
    // `verify` insists that ExecStart= is an existing executable: point it at the daemon we
    // built instead of its install location; every other line is verified as shipped.
    let daemon = gpuhook_e2e::built("gpu-mps-daemon");
    let text = read(&systemd_unit_path());
    assert!(text.contains("ExecStart=/usr/local/bin/gpu-mps-daemon "));
    let text = text.replace(
        "/usr/local/bin/gpu-mps-daemon",
        &daemon.display().to_string(),
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let unit = dir.path().join("gpu-mps-daemon.service");
    std::fs::write(&unit, text).expect("write unit");
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&unit)
        .output()
        .expect("run systemd-analyze");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "systemd-analyze verify failed:\n{stderr}"
    );
    // Unknown keys and bad values are only printed (exit status 0); lines about other units of
    // the host are not ours to judge.
    let ours: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("gpu-mps-daemon"))
        .collect();
    assert!(
        ours.is_empty(),
        "systemd-analyze verify complains:\n{stderr}"
    );
}
