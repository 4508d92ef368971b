//! The deployment files under `deploy/` against the things they must agree with.
//!
//! A manifest that validates against the Kubernetes schema can still pass a flag the daemon does
//! not have, mount a ConfigMap key that does not exist or embed a config the daemon refuses, and
//! nobody notices until a node fails to come up. So besides the schema check (the
//! `kubernetes-validate` tool, offline, with Kubernetes' own OpenAPI schemas) this test parses the
//! container args and the unit's `ExecStart` with the daemon's real command-line parser, resolves
//! every embedded config with the daemon's real config parser and planner against the simulated
//! L20 and T4, and checks the documented limits against what the planner computes. The CDI spec
//! the daemon would write from inside the DaemonSet is built with the daemon's own code and must
//! name host paths and the installed gpuhook (`deploy_support/cdi.rs`); the shipped L20 config is
//! run for real (`deploy_support/live.rs`: `/readyz`, `/metrics`, the spec file).

// Integration tests: a failed unwrap or expect is the test failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use clap::Parser;
use gpu_mps_daemon::cli::Cli;
use gpu_mps_daemon::config::{self, DEFAULT_MPS_ROOT};
use gpu_mps_daemon::inventory::GpuFacts;
use gpu_mps_daemon::plan::{self, GpuPlan, Overrides, Plan};
use gpuhook_sim::NodeProfile;
use serde::Deserialize;
use yaml_serde::Value;

#[path = "deploy_support/bundle.rs"]
mod bundle;
#[path = "deploy_support/cdi.rs"]
mod cdi;
#[path = "deploy_support/daemonset.rs"]
mod daemonset;
#[path = "deploy_support/live.rs"]
mod live;
#[path = "deploy_support/live_daemon.rs"]
mod live_daemon;
#[path = "deploy_support/schema.rs"]
mod schema;
#[path = "deploy_support/systemd.rs"]
mod systemd;

fn root() -> PathBuf {
    gpuhook_e2e::workspace_root()
}

/// The example overlay: the per-node MPS configs and DaemonSets on top of the base.
const EXAMPLE: &str = "deploy/kubernetes/examples/l20-t4";

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// Every document of a (multi-document) YAML file, empty documents left out.
fn yaml_docs(path: &Path) -> Vec<Value> {
    parse_docs(&read(path), &path.display().to_string())
}

/// Every document of YAML `text` (from `what`), empty documents left out.
fn parse_docs(text: &str, what: &str) -> Vec<Value> {
    yaml_serde::Deserializer::from_str(text)
        .map(|d| Value::deserialize(d).unwrap_or_else(|e| panic!("{what}: {e}")))
        .filter(|v| !v.is_null())
        .collect()
}

/// `v[a][b]...` as a string (panics with the path when absent).
fn s<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    get(v, path)
        .as_str()
        .unwrap_or_else(|| panic!("{path:?} is not a string"))
}

fn get<'a>(v: &'a Value, path: &[&str]) -> &'a Value {
    path.iter().fold(v, |v, k| {
        v.get(*k)
            .unwrap_or_else(|| panic!("missing {k} (of {path:?})"))
    })
}

fn seq<'a>(v: &'a Value, path: &[&str]) -> &'a [Value] {
    get(v, path)
        .as_sequence()
        .unwrap_or_else(|| panic!("{path:?} is not a list"))
}

/// The entry of a list of objects whose `name` is `name`.
fn named<'a>(list: &'a [Value], name: &str) -> &'a Value {
    list.iter()
        .find(|v| v.get("name").and_then(Value::as_str) == Some(name))
        .unwrap_or_else(|| panic!("no entry named {name}"))
}

fn by_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter()
        .filter(|d| d.get("kind").and_then(Value::as_str) == Some(kind))
        .collect()
}

/// GPU facts of a built-in simulated node, as the daemon's inventory would report them.
fn facts(profile: &str) -> Vec<GpuFacts> {
    let p = NodeProfile::builtin(profile).unwrap_or_else(|e| panic!("profile {profile}: {e}"));
    p.gpus
        .iter()
        .map(|g| GpuFacts {
            index: g.index,
            uuid: g.uuid.clone(),
            memory_mib: g.memory_mib,
            mig_enabled: g.mig_mode,
            mig_uuids: Vec::new(),
            compute_capability: None,
        })
        .collect()
}

/// Parses `text` with the daemon's parser and resolves it against `profile`'s GPUs, with the
/// command-line overrides `ov`, as the daemon does at start.
fn resolve_plan(text: &str, profile: &str, ov: &Overrides) -> Plan {
    let cfg =
        config::parse(text).unwrap_or_else(|e| panic!("daemon refuses the config: {e}\n{text}"));
    let plan = plan::resolve(&cfg, &facts(profile), ov)
        .unwrap_or_else(|e| panic!("config does not fit the {profile} node: {e}\n{text}"));
    assert!(plan.warnings.is_empty(), "{:?}", plan.warnings);
    assert_eq!(plan.mps_root, Path::new(DEFAULT_MPS_ROOT));
    plan
}

/// The GPUs of [`resolve_plan`] without overrides.
fn resolve(text: &str, profile: &str) -> Vec<GpuPlan> {
    resolve_plan(text, profile, &Overrides::default()).gpus
}

/// Checks one embedded config is the device-plugin shape with one resource of `replicas`.
fn check_device_plugin_shape(text: &str, replicas: u64) {
    let v: Value = yaml_serde::from_str(text).expect("embedded config is YAML");
    assert_eq!(s(&v, &["version"]), "v1");
    let res = seq(&v, &["sharing", "mps", "resources"]);
    assert_eq!(res.len(), 1, "{text}");
    assert_eq!(s(&res[0], &["name"]), "nvidia.com/gpu");
    assert_eq!(get(&res[0], &["replicas"]).as_u64(), Some(replicas));
    assert_eq!(s(&res[0], &["devices"]), "all");
}

#[test]
fn configmap_embeds_device_plugin_configs_the_daemon_accepts() {
    let path = root().join(EXAMPLE).join("configmap.yaml");
    let file_text = read(&path);
    let docs = yaml_docs(&path);
    let cm = by_kind(&docs, "ConfigMap");
    assert_eq!(cm.len(), 1);
    let data = get(cm[0], &["data"]).as_mapping().expect("data");
    let keys: Vec<&str> = data.keys().filter_map(Value::as_str).collect();
    assert_eq!(keys, ["l20.yaml", "t4.yaml"]);
    // key, simulated node, replicas, GPU memory, thread %, memory limit per client
    for (key, profile, replicas, mem, pct, limit) in [
        ("l20.yaml", "l20", 8, 46068, 12, 5758),
        ("t4.yaml", "t4", 3, 15360, 33, 5120),
    ] {
        let text = s(cm[0], &["data", key]);
        check_device_plugin_shape(text, replicas);
        let gpus = resolve(text, profile);
        assert_eq!(gpus.len(), 1, "{key}");
        let g = &gpus[0];
        assert_eq!(
            (g.resource.as_str(), u64::from(g.replicas), g.memory_mib),
            ("nvidia.com/gpu", replicas, mem)
        );
        assert_eq!(g.active_thread_percentage, pct, "{key}");
        assert_eq!(g.pinned_memory_limit_mib, Some(limit), "{key}");
        assert_eq!(
            g.shm_size,
            Some(1 << 30),
            "{key}: clients in pods need the shared shm tmpfs"
        );
        cdi::check_configmap_settings(key, text, profile);
        // deploy/README.md's worked example: the env its CDI devices carry.
        let readme = read(&root().join("deploy/README.md"));
        let env = format!(
            "`CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={pct}`, `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0={limit}M`"
        );
        assert!(readme.contains(&env), "deploy/README.md must show {env}");
        // The comments an admin reads state the limits the daemon really applies.
        for want in [
            format!("{pct} % of the SMs and {limit} MiB"),
            format!("{pct} %    | {limit} MiB"),
        ] {
            assert!(
                file_text.contains(&want),
                "{key}: the comments must say {want:?}"
            );
        }
    }
}

/// The container's `--flag value` args, parsed by the daemon's own command line.
fn daemon_args(container: &Value) -> gpu_mps_daemon::cli::RunArgs {
    let mut argv: Vec<String> = seq(container, &["command"])
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    // The binary's path in the image deploy/image/build.sh builds (the image has no PATH).
    assert_eq!(argv, [format!("{}/gpu-mps-daemon", bundle::IMAGE_BIN_DIR)]);
    argv.extend(
        seq(container, &["args"])
            .iter()
            .map(|v| v.as_str().expect("string arg").to_string()),
    );
    let cli = Cli::try_parse_from(&argv)
        .unwrap_or_else(|e| panic!("gpu-mps-daemon rejects {argv:?}: {e}"));
    assert!(
        cli.command.is_none(),
        "the DaemonSet must run the daemon, not a subcommand"
    );
    cli.run
}

#[test]
fn daemonsets_agree_with_the_daemon_and_the_configmap() {
    let docs = yaml_docs(&root().join(EXAMPLE).join("gpu-mps-daemon.yaml"));
    let cm_docs = yaml_docs(&root().join(EXAMPLE).join("configmap.yaml"));
    let cm = by_kind(&cm_docs, "ConfigMap")[0];
    let ns_docs = yaml_docs(&root().join("deploy/kubernetes/base/namespace.yaml"));
    let ns = s(by_kind(&ns_docs, "Namespace")[0], &["metadata", "name"]);
    assert_eq!(
        s(
            get(&ns_docs[0], &["metadata", "labels"]),
            &["pod-security.kubernetes.io/enforce"]
        ),
        "privileged"
    );
    let sa = s(by_kind(&docs, "ServiceAccount")[0], &["metadata", "name"]);
    assert_eq!(s(cm, &["metadata", "namespace"]), ns);
    let mut keys_used = Vec::new();
    let daemonsets = by_kind(&docs, "DaemonSet");
    assert_eq!(daemonsets.len(), 2);
    for ds in daemonsets {
        let name = s(ds, &["metadata", "name"]);
        assert_eq!(s(ds, &["metadata", "namespace"]), ns, "{name}");
        daemonset::check_pod(name, ds, sa);
        let pod = get(ds, &["spec", "template", "spec"]);
        let containers = seq(pod, &["containers"]);
        assert_eq!(containers.len(), 1);
        let c = &containers[0];
        assert_eq!(
            get(c, &["securityContext", "privileged"]).as_bool(),
            Some(true),
            "{name}"
        );
        let args = daemon_args(c);
        let mounts = seq(c, &["volumeMounts"]);
        let volumes = seq(pod, &["volumes"]);

        let key = daemonset::check_config_mount(name, pod, cm, &args, mounts, volumes);
        keys_used.push(key.to_string());
        daemonset::check_host_mounts(name, &args, mounts, volumes);
        // What the daemon writes from inside this pod must make sense on the host.
        let text = s(cm, &["data", key]);
        cdi::check_daemonset_host_view(name, text, &args, mounts, volumes);

        daemonset::check_probes(name, ds, c, &args);
    }
    keys_used.sort();
    assert_eq!(
        keys_used,
        ["l20.yaml", "t4.yaml"],
        "one DaemonSet per ConfigMap key"
    );
}
