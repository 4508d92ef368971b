//! The MIG manager agent (`gpuhook-mig-manager`'s library) end to end on a simulated node: a fake
//! API server on a loopback address (gpuhook-kube's test constructor) holding the Node, the
//! simulated A100 80 GB pair `a100-mig-mixed` (mock NVML with the MIG write calls, layout persisted
//! for every process), seed 003's `mig-parted-config` ConfigMap verbatim, the real
//! `gpuhook cdi generate` as the CDI refresh, and a fake host `/proc` where gpuhook's device
//! plugin runs until the DaemonSet controller (played by the API server's PATCH hook) evicts it
//! for `paused-for-mig-change`.
//!
//! Expectations from NVIDIA's k8s-mig-manager (facts §7): `pending` then `success`/`failed` in
//! `nvidia.com/mig.config.state`, deploy labels set to `paused-for-mig-change` and restored;
//! from the issue: an unknown config or an invalid file fails with the reason and touches no GPU,
//! a client that never stops is restored and fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "mig_agent/api.rs"]
mod api;
#[path = "mig_agent/holders.rs"]
mod holders;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use api::FakeApi;
use gpuhook_e2e::{built, e2e_ready, mock_nvml_lib};
use gpuhook_mig::{MigBackend, NvmlBackend};
use gpuhook_mig_manager::agent::{Agent, Step, Timing};
use gpuhook_mig_manager::holders::HolderSources;
use gpuhook_mig_manager::host::{Argv, NodeHost};
use gpuhook_mig_manager::labels::{CONFIG_LABEL, PAUSED, REASON_ANNOTATION, STATE_LABEL};
use gpuhook_mig_manager::layout::MigParted;
use gpuhook_mig_manager::node::KubeNode;
use gpuhook_mig_manager::reconcile::{Reconciler, Settings};
use gpuhook_node::{Nvml, NvmlLocation};
use gpuhook_sim::{materialise, MaterialiseOptions, NodeProfile};
use serde_json::{json, Value};

const NODE: &str = "gpu-node-1";
const DP: &str = "nvidia.com/gpu.deploy.device-plugin";
const DCGM: &str = "nvidia.com/gpu.deploy.dcgm";
/// gpuhook-device-plugin's /proc/<pid>/comm.
const PLUGIN_COMM: &str = "gpuhook-device-";

/// Seed 003's ConfigMap `mig-parted-config`, key `config.yaml` (its indentation restored).
const SEED_003: &str = r#"version: v1
mig-configs:
  mixed-workload:
    - devices: [0]
      mig-enabled: true
      mig-devices:
        "3g.40gb": 1
        "2g.20gb": 2
  all-small:
    - devices: [0]
      mig-enabled: true
      mig-devices:
        "1g.10gb": 7
"#;

/// One simulated node at a time: each test loads its node's mock NVML into this process.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

struct Sim {
    _dir: tempfile::TempDir,
    root: PathBuf,
    proc_root: PathBuf,
    config: PathBuf,
    spec: PathBuf,
    cache: PathBuf,
    /// The kubelet's pod-resources socket (absent unless a test serves one).
    pod_resources: PathBuf,
    /// Last: released after the directory is gone.
    _lock: std::sync::MutexGuard<'static, ()>,
}

fn sim() -> Option<Sim> {
    if !e2e_ready("mig_agent", &[]) {
        return None;
    }
    let lock = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let opts = MaterialiseOptions {
        mock_nvml: Some(mock_nvml_lib()),
        bin_dir: Some(gpuhook_e2e::bin_dir()),
        ldconfig: None,
    };
    materialise(
        &NodeProfile::builtin("a100-mig-mixed").unwrap(),
        &root,
        &opts,
    )
    .unwrap();
    let s = Sim {
        proc_root: dir.path().join("proc"),
        config: dir.path().join("config.yaml"),
        spec: dir.path().join("cdi/nvidia.com-gpu.json"),
        cache: dir.path().join("inventory.json"),
        pod_resources: dir.path().join("pod-resources/kubelet.sock"),
        root,
        _dir: dir,
        _lock: lock,
    };
    std::fs::create_dir_all(s.spec.parent().unwrap()).unwrap();
    std::fs::write(&s.config, SEED_003).unwrap();
    plugin_running(&s.proc_root, true);
    Some(s)
}

/// Starts or ends the fake device plugin process in the fake host /proc.
fn plugin_running(proc_root: &Path, on: bool) {
    let d = proc_root.join("4242");
    if on {
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("comm"), format!("{PLUGIN_COMM}\n")).unwrap();
    } else {
        let _ = std::fs::remove_dir_all(&d);
    }
}

/// The API server; with `evicts`, a paused device-plugin label ends the plugin (DaemonSet
/// controller) and a restored one starts it again.
fn api(s: &Sim, config: &str, evicts: bool) -> FakeApi {
    let proc_root = s.proc_root.clone();
    let labels = json!({CONFIG_LABEL: config, DP: "true", DCGM: "false"});
    FakeApi::start(NODE, labels, move |node: &Value| {
        if evicts {
            let v = node["metadata"]["labels"][DP].as_str();
            plugin_running(&proc_root, v != Some(PAUSED));
        }
    })
}

fn agent(s: &Sim, api: &FakeApi, client_timeout: Duration) -> Agent {
    agent_with(s, api, client_timeout, false)
}

/// The agent; with `drain`, held MIG devices are destroyed anyway.
fn agent_with(s: &Sim, api: &FakeApi, client_timeout: Duration, drain: bool) -> Agent {
    let client = gpuhook_kube::Client::loopback(&api.url).unwrap();
    let path = |p: &Path| p.to_str().unwrap().to_string();
    let cdi = Argv {
        program: built("gpuhook"),
        args: [
            "cdi",
            "generate",
            "--driver-root",
            &path(&s.root),
            "--output",
        ]
        .iter()
        .map(|a| a.to_string())
        .chain([path(&s.spec), "--inventory-cache".into(), path(&s.cache)])
        .collect(),
        root: None,
    };
    let reconciler = Reconciler {
        api: Box::new(KubeNode::new(client, NODE, Some("gpuhook-system")).unwrap()),
        layout: Box::new(MigParted {
            config_file: s.config.clone(),
            driver_root: s.root.clone(),
            nvml_lib: None,
            holders: HolderSources {
                pod_resources: Some(s.pod_resources.clone()),
                mps_status: Some(s.root.join("run/gpuhook/mps/status.json")),
                proc_root: s.proc_root.clone(),
            },
            drain,
        }),
        host: Box::new(NodeHost {
            proc_root: s.proc_root.clone(),
            mps_root: s.root.join("run/gpuhook/mps"),
            cdi_refresh: Some(cdi),
            reboot: Argv {
                program: "/bin/false".into(),
                args: vec![],
                root: None,
            },
        }),
        settings: Settings {
            with_reboot: false,
            client_timeout,
            client_poll: Duration::from_millis(20),
            stop: Default::default(),
        },
    };
    let timing = Timing {
        poll: Duration::from_millis(10),
        min_backoff: Duration::from_secs(60),
        max_backoff: Duration::from_secs(60),
    };
    Agent::new(reconciler, timing)
}

/// GPU index -> its layout (profile -> count), read through NVML as a fresh process would.
fn layouts(root: &Path) -> Vec<BTreeMap<String, u32>> {
    let loc = NvmlLocation::locate(root, None).unwrap();
    let mut b = NvmlBackend::new(Nvml::load(&loc).unwrap());
    b.gpus().unwrap().iter().map(|g| g.layout()).collect()
}

fn layout(kv: &[(&str, u32)]) -> BTreeMap<String, u32> {
    kv.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

/// The CDI spec's MIG device names of GPU `index` (`<gpu>:<n>`).
fn spec_mig_names(spec: &Path, index: u32) -> Vec<String> {
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(spec).unwrap()).unwrap();
    let prefix = format!("{index}:");
    doc["devices"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d["name"].as_str())
        .filter(|n| n.starts_with(&prefix))
        .map(str::to_string)
        .collect()
}

/// The `gi<N>` entries of `/proc/driver/nvidia/capabilities/gpu<minor>/mig` in the driver root.
fn gi_caps(root: &Path, minor: u32) -> usize {
    let dir = root.join(format!("proc/driver/nvidia/capabilities/gpu{minor}/mig"));
    std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.file_name().to_string_lossy().starts_with("gi"))
        })
        .count()
}

fn ran(step: Step) -> Result<String, String> {
    match step {
        Step::Ran { result, .. } => result.map(|s| s.as_str().to_string()),
        Step::Idle => panic!("the agent did not run"),
    }
}

fn strs(v: &[Value]) -> Vec<Option<&str>> {
    v.iter().map(Value::as_str).collect()
}

#[test]
fn label_change_pauses_applies_refreshes_cdi_restores_and_succeeds_then_follows_a_relabel() {
    let Some(s) = sim() else { return };
    let mixed = layout(&[("3g.40gb", 1), ("2g.20gb", 2)]);
    let small = layout(&[("1g.10gb", 7)]);
    assert_eq!(
        layouts(&s.root),
        [mixed.clone(), small.clone()],
        "the profile's layout"
    );
    let api = api(&s, "all-small", true);
    let mut a = agent(&s, &api, Duration::from_secs(10));

    assert_eq!(ran(a.step()), Ok("success".into()));
    assert_eq!(
        layouts(&s.root),
        [small.clone(), small.clone()],
        "GPU 0 changed, GPU 1 kept"
    );
    assert_eq!(
        spec_mig_names(&s.spec, 0).len(),
        7,
        "the CDI spec lists the new devices"
    );
    assert_eq!(spec_mig_names(&s.spec, 1).len(), 7);
    // What a running device plugin watches to re-advertise (device-plugin/src/source.rs
    // `device_files`): the driver's MIG capability entries of GPU 0 follow the new layout.
    assert_eq!(gi_caps(&s.root, 0), 7);
    assert_eq!(
        strs(&api.label_history(STATE_LABEL)),
        [Some("pending"), Some("success")]
    );
    assert_eq!(strs(&api.label_history(DP)), [Some(PAUSED), Some("true")]);
    assert!(
        api.label_history(DCGM).is_empty(),
        "false stays false, unwritten"
    );
    assert!(s.proc_root.join("4242").exists(), "the plugin is back");
    assert_eq!(
        a.step(),
        Step::Idle,
        "applied: nothing until the label changes"
    );

    api.set_label(CONFIG_LABEL, "mixed-workload");
    assert_eq!(ran(a.step()), Ok("success".into()));
    assert_eq!(layouts(&s.root), [mixed, small]);
    assert_eq!(spec_mig_names(&s.spec, 0), ["0:0", "0:1", "0:2"]);
    assert_eq!(gi_caps(&s.root, 0), 3);
    assert_eq!(api.label(DP).as_deref(), Some("true"));
    let events = api.events();
    assert!(
        events.iter().any(|e| e["reason"] == "MIGConfigApplied"
            && e["involvedObject"]["name"] == NODE
            && e["type"] == "Normal"),
        "{events:?}"
    );
}

#[test]
fn unknown_config_or_invalid_file_fails_with_the_reason_and_touches_no_gpu() {
    let Some(s) = sim() else { return };
    let before = layouts(&s.root);
    let api = api(&s, "does-not-exist", true);
    let mut a = agent(&s, &api, Duration::from_secs(10));
    let err = ran(a.step()).unwrap_err();
    assert!(
        err.contains("does-not-exist") && err.contains("all-small"),
        "{err}"
    );
    assert_eq!(api.label(STATE_LABEL).as_deref(), Some("failed"));
    assert!(api
        .annotation(REASON_ANNOTATION)
        .unwrap()
        .contains("does-not-exist"));
    assert!(api.label_history(DP).is_empty(), "no client paused");
    assert_eq!(layouts(&s.root), before);
    assert!(!s.spec.exists());

    std::fs::write(&s.config, "version: v2\nmig-configs: {}\n").unwrap();
    api.set_label(CONFIG_LABEL, "all-small");
    let err = ran(a.step()).unwrap_err();
    assert!(
        err.contains("unknown version") && err.contains("config.yaml"),
        "{err}"
    );
    assert_eq!(layouts(&s.root), before);
    assert_eq!(api.label(DP).as_deref(), Some("true"));
    let warnings = api
        .events()
        .iter()
        .filter(|e| e["type"] == "Warning")
        .count();
    assert_eq!(warnings, 2);
}

#[test]
fn a_client_that_never_stops_is_restored_and_the_state_failed() {
    let Some(s) = sim() else { return };
    let before = layouts(&s.root);
    let api = api(&s, "all-small", false);
    let mut a = agent(&s, &api, Duration::from_millis(300));
    let err = ran(a.step()).unwrap_err();
    assert!(
        err.contains("timed out") && err.contains(PLUGIN_COMM),
        "{err}"
    );
    assert_eq!(
        strs(&api.label_history(STATE_LABEL)),
        [Some("pending"), Some("failed")]
    );
    assert_eq!(strs(&api.label_history(DP)), [Some(PAUSED), Some("true")]);
    assert_eq!(layouts(&s.root), before, "no GPU touched");
    assert!(a.retry_at().is_some(), "retried with backoff");
}
