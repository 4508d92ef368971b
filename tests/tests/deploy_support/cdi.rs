//! What the daemon hands to the host from inside the DaemonSet: its CDI spec, and the host
//! file systems it reads to watch clients.
//!
//! The container runtime on the host reads `nvidia.com-gpu-mps.json`, so every path in it must
//! be a host path although the daemon sees the host's `/` at `/driver-root`; its hooks run the
//! gpuhook that `containerd/README.md` installs; and client enforcement needs the host's cgroup
//! file system where `cgroupRoot` says. A mismatch in any of them only shows on a real node (a
//! container that fails to start, or clients of deleted containers that are never ended), so
//! they are checked here against the manifests, with the daemon's own planner and spec builder.

use std::path::{Path, PathBuf};

use gpu_mps_daemon::cli::RunArgs;
use gpu_mps_daemon::plan::Overrides;
use gpuhook_node::{Capability, DriverLibrary};
use serde_json::Value as Json;
use yaml_serde::Value;

use super::{get, live, named, read, resolve_plan, root, s};

/// Where the daemon writes its spec in the DaemonSet (and the runtimes read it on the host).
const CDI_DIR: &str = "/var/run/cdi";
/// The host's cgroup file system, as the DaemonSet mounts it.
const HOST_CGROUP: &str = "/sys/fs/cgroup";
/// A driver library of the simulated inventory, as the driver root sees it.
const LIBCUDA: &str = "/usr/lib/x86_64-linux-gnu/libcuda.so.570.158.01";

/// Where `containerd/README.md` installs gpuhook: the directory of its
/// `install -m 0755 gpuhook gpuhook-runtime <dir>/` line, or `<root>/bin` of its
/// `cargo install ... --path hook --root <root>` line.
pub fn installed_gpuhook() -> PathBuf {
    let text = read(&root().join("containerd/README.md"));
    for line in text.lines().map(str::trim_start) {
        let words: Vec<&str> = line.split_whitespace().collect();
        if line.starts_with("install ") && words.contains(&"gpuhook") {
            let dir = words.last().expect("install target");
            assert!(dir.ends_with('/'), "install target is a directory: {line}");
            return Path::new(dir).join("gpuhook");
        }
        if line.starts_with("cargo install ") && line.contains("--path hook") {
            let at = words.iter().position(|w| *w == "--root");
            let dir = at.and_then(|i| words.get(i + 1)).unwrap_or_else(|| {
                panic!(
                    "containerd/README.md: `{line}` must name --root (cargo's default is ~/.cargo)"
                )
            });
            return Path::new(dir).join("bin/gpuhook");
        }
    }
    panic!("containerd/README.md installs gpuhook with an `install` or `cargo install` line")
}

/// Where the bundle's node installer (deploy/kubernetes/base) puts gpuhook: the default
/// `--install-dir` of `gpuhook-installer install` (the DaemonSet does not override it).
pub fn bundle_gpuhook() -> PathBuf {
    let out = std::process::Command::new(gpuhook_e2e::built("gpuhook-installer"))
        .args(["install", "--help"])
        .output()
        .expect("run gpuhook-installer install --help");
    let help = String::from_utf8_lossy(&out.stdout);
    let line = help
        .lines()
        .find(|l| l.trim_start().starts_with("--install-dir"))
        .unwrap_or_else(|| panic!("no --install-dir in:\n{help}"));
    let dir = line
        .split("[default: ")
        .nth(1)
        .and_then(|d| d.strip_suffix(']'))
        .unwrap_or_else(|| panic!("no default in {line}"));
    Path::new(dir).join("gpuhook")
}

/// Every `mpsDaemon` key the DaemonSet relies on is in the ConfigMap key `key` and resolves the
/// way the daemon reads it.
pub fn check_configmap_settings(key: &str, text: &str, profile: &str) {
    let plan = resolve_plan(text, profile, &Overrides::default());
    // The raw key, not just the resolved value: without it the daemon falls back to driverRoot,
    // which in the DaemonSet is /driver-root.
    let v: Value = yaml_serde::from_str(text).expect("YAML");
    assert_eq!(
        v.get("mpsDaemon").and_then(|d| d.get("hostDriverRoot")),
        Some(&Value::from("/")),
        "{key}: mpsDaemon.hostDriverRoot: / is required (the DaemonSet passes --driver-root)"
    );
    assert_eq!(plan.cdi.host_driver_root.as_deref(), Some(Path::new("/")));
    assert_eq!(
        plan.cdi.gpuhook_path,
        bundle_gpuhook(),
        "{key}: mpsDaemon.gpuhookPath must be where the bundle's node installer puts gpuhook"
    );
    assert_eq!(plan.cdi.spec_dir, Path::new(CDI_DIR), "{key}");
    assert_eq!(plan.enforce.proc_root, Path::new("/proc"), "{key}");
}

/// The DaemonSet `name` running the ConfigMap text `text` with `args`: the spec it writes names
/// host paths only and the installed gpuhook; the CDI directory and the host's cgroup file
/// system are mounted where the config says.
pub fn check_daemonset_host_view(
    name: &str,
    text: &str,
    args: &RunArgs,
    mounts: &[Value],
    volumes: &[Value],
) {
    let ov = Overrides {
        driver_root: args.driver_root.clone(),
        cdi_spec_dir: args.cdi_spec_dir.clone(),
        gpuhook_path: args.gpuhook_path.clone(),
        ..Overrides::default()
    };
    let plan = resolve_plan(text, "l20", &ov);
    let driver_root = args.driver_root.clone().expect("--driver-root");
    assert_eq!(plan.gpus[0].driver_root, driver_root, "{name}");

    // The spec directory is the host's, at the same path.
    let cdi_dir = plan.cdi.spec_dir.to_str().unwrap();
    assert_eq!(s(named(mounts, "cdi"), &["mountPath"]), cdi_dir, "{name}");
    assert_eq!(
        s(named(volumes, "cdi"), &["hostPath", "path"]),
        cdi_dir,
        "{name}"
    );
    assert!(
        named(mounts, "cdi").get("readOnly").is_none(),
        "{name}: the daemon writes the spec"
    );

    // cgroupRoot is a read-only mount of the host's cgroup file system; hostPID gives /proc.
    let cg = mounts
        .iter()
        .find(|m| Path::new(s(m, &["mountPath"])) == plan.enforce.cgroup_root)
        .unwrap_or_else(|| {
            panic!(
                "{name}: nothing mounted at cgroupRoot {}",
                plan.enforce.cgroup_root.display()
            )
        });
    assert_eq!(get(cg, &["readOnly"]).as_bool(), Some(true), "{name}");
    let vol = named(volumes, s(cg, &["name"]));
    assert_eq!(s(vol, &["hostPath", "path"]), HOST_CGROUP, "{name}");
    assert_eq!(plan.enforce.proc_root, Path::new("/proc"), "{name}");

    // The spec, built by the daemon from an inventory discovered under --driver-root.
    let spec = spec_json(&plan, &driver_root);
    let all = spec.to_string();
    assert!(
        !all.contains(driver_root.to_str().unwrap()),
        "{name}: the spec names paths under {} that do not exist on the host:\n{spec:#}",
        driver_root.display()
    );
    let host_paths = strings_at(&spec, "hostPath");
    assert!(
        host_paths.iter().any(|p| p == LIBCUDA),
        "{name}: the driver library must be mounted from its host path: {host_paths:?}"
    );
    let hooks = hook_paths(&spec);
    let gpuhook = bundle_gpuhook();
    assert!(
        !hooks.is_empty() && hooks.iter().all(|p| Path::new(p) == gpuhook),
        "{name}: every hook must run {}: {hooks:?}",
        gpuhook.display()
    );

    // The check has teeth: the same config without hostDriverRoot leaks /driver-root.
    let without: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("hostDriverRoot:"))
        .map(|l| format!("{l}\n"))
        .collect();
    let leaky = spec_json(&resolve_plan(&without, "l20", &ov), &driver_root);
    assert!(leaky.to_string().contains(driver_root.to_str().unwrap()));
}

/// The daemon's spec for `plan` on the simulated L20 discovered under `driver_root`, with one
/// driver library, as JSON.
fn spec_json(plan: &gpu_mps_daemon::plan::Plan, driver_root: &Path) -> Json {
    let mut inv = live::l20_inventory(driver_root);
    inv.files.libraries.push(DriverLibrary {
        capability: Capability::Compute,
        path: LIBCUDA.into(),
        soname: Some("libcuda.so.1".into()),
    });
    inv.files
        .library_dirs
        .push(Path::new(LIBCUDA).parent().unwrap().into());
    let spec = gpu_mps_daemon::cdi::build_spec(plan, &inv, None)
        .expect("the daemon builds its spec")
        .expect("the spec has devices");
    serde_json::to_value(&spec).expect("spec as JSON")
}

/// The `path` of every hook anywhere in a spec.
pub fn hook_paths(v: &Json) -> Vec<String> {
    let mut out = Vec::new();
    match v {
        Json::Object(m) => {
            for (k, x) in m {
                match (k.as_str(), x.as_array()) {
                    ("hooks", Some(hooks)) => out.extend(
                        hooks
                            .iter()
                            .map(|h| h["path"].as_str().unwrap().to_string()),
                    ),
                    _ => out.extend(hook_paths(x)),
                }
            }
        }
        Json::Array(a) => a.iter().for_each(|x| out.extend(hook_paths(x))),
        _ => {}
    }
    out
}

/// Every string value of a `key` field anywhere in `v`.
pub fn strings_at(v: &Json, key: &str) -> Vec<String> {
    let mut out = Vec::new();
    match v {
        Json::Object(m) => {
            for (k, x) in m {
                match x.as_str() {
                    Some(s) if k == key => out.push(s.to_string()),
                    _ => out.extend(strings_at(x, key)),
                }
            }
        }
        Json::Array(a) => a.iter().for_each(|x| out.extend(strings_at(x, key))),
        _ => {}
    }
    out
}

#[test]
fn readme_lists_every_metric_the_daemon_serves() {
    let exposition = gpu_mps_daemon::metrics::render(&gpu_mps_daemon::status::Board::default());
    let declared: Vec<(&str, &str)> = exposition
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .collect();
    assert!(declared.len() >= 10, "{exposition}");
    let readme = read(&root().join("deploy/README.md"));
    for (metric, kind) in &declared {
        assert!(
            readme.contains(&format!("| `{metric}` | {kind} |")),
            "deploy/README.md must list {metric} ({kind})"
        );
    }
    // And nothing the daemon does not serve.
    let listed = readme
        .lines()
        .filter_map(|l| l.strip_prefix("| `gpuhook_mps_"))
        .count();
    assert_eq!(
        listed,
        declared.len(),
        "deploy/README.md lists unknown metrics"
    );
}
