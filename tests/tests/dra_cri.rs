//! A DRA claim's CDI devices through containerd 1.6's CRI plugin and gpuhook-runtime.
//!
//! `gpuhook-dra-plugin` runs as a process on a simulated 2-GPU node against the validating fake
//! API server (`dra/tests/common/apiserver.rs`); the fake kubelet (`dra/tests/common/kubelet.rs`)
//! registers it and calls `NodePrepareResources` over v1 for a claim of `gpu-<minor of GPU 0>`.
//! Then a pod sandbox and a container are created through CRI with the returned CDI IDs:
//!
//! 1. the way a 1.31+ kubelet passes them: only in `ContainerConfig.CDI_devices` (field 17;
//!    `kuberuntime_container.go:generateContainerConfig` → `makeCDIDevices`; the DRA manager's
//!    `GetResources` returns no annotations since 1.31, "As of Kubernetes 1.31, CDI device IDs
//!    are not passed via annotations anymore"). containerd 1.6 does not know the field and
//!    drops it; the bridge is the plugin's claim index (dra/README.md, "The claim index"): the
//!    claim is reserved for the pod, whose container `gpu` names it in `resources.claims` (the
//!    fake API server serves the pod); at prepare the plugin records the pod's containers, and
//!    gpuhook-runtime finds them by containerd's `io.kubernetes.cri.sandbox-uid` and
//!    `container-name` annotations. Container `gpu` gets exactly the claim's GPU node and the
//!    claim spec's env; container `log` of the same pod, which uses no claim, gets nothing;
////! 2. the way kubelets 1.26–1.30 passed them (`pkg/kubelet/cm/dra/cdi.go:generateCDIAnnotations`:
//!    one container annotation `cdi.k8s.io/<driver>_<claim UID>` = the IDs joined by `,`), which
//!    containerd 1.6 hands through to the OCI spec (`container_annotations`, set by `gpuhook
//!    runtime configure`) and gpuhook-runtime resolves from the spec dirs: the container gets
//!    exactly the claim's GPU node and the claim spec's env, and no other GPU.
//!
//! 3. pod `joiner` joins the prepared claim's `reservedFor` (no second `NodePrepareResources`,
//!    as the kubelet serves it from its claim-info cache): indexed by the plugin's watch, its
//!    container gets exactly the claim's GPU from `CDI_devices` alone;
//! 4. with the gpuhook handler's `pod_annotations = ["*", "*/*"]`, pod `intruder` (not reserved)
//!    sets `io.kubernetes.cri.sandbox-uid` / `container-name` in its pod annotations to the
//!    indexed pod's: containerd 1.6 overwrites them with its own (the OCI spec it made has the
//!    intruder's UID and the pass-through probe annotation) and the container gets no GPU.
//!
//! Then `NodeUnprepareResources` removes the claim's spec and its index entry.
//!
//! Run under `flock /tmp/gpuhook-e2e.lock`. Needs root, containerd, ctr, runc, static busybox and
//! `cargo build -p gpuhook-dra --bins` (plus what the device-plugin CRI tests need); with
//! GPUHOOK_REQUIRE_E2E=1 a missing tool fails the test instead of skipping it.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test crate: a panic is a test failure

mod cdi_support;
mod device_plugin_cri_support;
#[path = "../../dra/tests/common/apiserver.rs"]
mod dra_apiserver;
#[path = "../../dra/tests/common/kubelet.rs"]
mod dra_kubelet;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use device_plugin_cri_support::kubelet::{container_config, RunOptions};
use device_plugin_cri_support::rig::{ready, tmp, Bench};
use device_plugin_cri_support::{seen, Seen, REPORT};
use dra_apiserver::ApiServer;
use gpuhook_dra::api::{self, v1::DRAPluginClient};
use serde_json::Value;

const NODE: &str = "node-a";
const DRIVER: &str = "gpu.nvidia.com";
const CLAIM_UID: &str = "5f0c8a52-3c1e-4b7a-9d43-6e2a1f7b9c10";

/// `gpuhook-dra-plugin` as the DaemonSet runs it (private dirs, the fake API server); killed on drop.
struct DraPlugin {
    child: Child,
    log: PathBuf,
}

impl DraPlugin {
    fn start(dir: &Path, root: &Path, cdi: &Path, api: &ApiServer) -> DraPlugin {
        let log = dir.join("dra-plugin.log");
        let err = std::fs::File::create(&log).unwrap();
        let child = Command::new(gpuhook_e2e::built("gpuhook-dra-plugin"))
            .args(["--node-name", NODE, "--sharing", "none", "--no-health"])
            .args(["--mig-poll-ms", "0", "--kube-api-url", &api.url])
            .args(["--claim-index-poll-ms", "200"])
            .arg("--driver-root")
            .arg(root)
            .arg("--cdi-root")
            .arg(cdi)
            .arg("--gpuhook-path")
            .arg(gpuhook_e2e::built("gpuhook"))
            .arg("--registry-dir")
            .arg(dir.join("plugins_registry"))
            .arg("--plugin-dir")
            .arg(dir.join("plugin"))
            .env("RUST_LOG", "info,gpuhook_dra=debug")
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .unwrap();
        DraPlugin { child, log }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for DraPlugin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The NVIDIA_/CUDA_ env of the claim's spec (common and device edits), as the container
/// should see it.
fn spec_env(spec: &Value) -> BTreeMap<String, String> {
    let mut edits = vec![&spec["containerEdits"]];
    edits.extend(
        spec["devices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| &d["containerEdits"]),
    );
    edits
        .iter()
        .filter_map(|e| e["env"].as_array())
        .flatten()
        .filter_map(|v| v.as_str()?.split_once('='))
        .filter(|(k, _)| k.starts_with("NVIDIA_") || k.starts_with("CUDA_"))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

async fn run(bench: &mut Bench, pod: &str, container: &str, opts: RunOptions) -> Seen {
    let ran = bench
        .cri
        .run(pod, container_config(container, REPORT, opts))
        .await;
    assert_eq!(
        ran.exit_code,
        0,
        "container failed:\n{}\ngpuhook log:\n{}",
        ran.log,
        std::fs::read_to_string(&bench.node.gpuhook_log).unwrap_or_default()
    );
    seen(&ran.log)
}

async fn prepare(
    dir: &Path,
    plugin: &DraPlugin,
) -> (DRAPluginClient<tonic::transport::Channel>, Vec<String>) {
    let reg = dra_kubelet::register(&dir.join("plugins_registry"), DRIVER).await;
    assert_eq!(reg.version, api::DRA_V1);
    let mut client = DRAPluginClient::new(reg.channel);
    let claim = dra_kubelet::claim("ns", "gpu-claim", CLAIM_UID);
    let resp = client
        .node_prepare_resources(api::NodePrepareResourcesRequest {
            claims: vec![claim],
        })
        .await
        .unwrap_or_else(|e| panic!("NodePrepareResources: {e}\n{}", plugin.log_text()))
        .into_inner();
    let r = &resp.claims[CLAIM_UID];
    assert!(r.error.is_empty(), "{}\n{}", r.error, plugin.log_text());
    let ids: Vec<String> = r
        .devices
        .iter()
        .flat_map(|d| d.cdi_device_ids.clone())
        .collect();
    (client, ids)
}

/// The pod of case 1, as the scheduler reserves the claim for it; its sandbox UID is the one the
/// CRI bench gives pod `kubelet-cdi-devices` (`uid-<name>`).
const POD: &str = "kubelet-cdi-devices";
const POD_UID: &str = "uid-kubelet-cdi-devices";

/// A pod whose container `gpu` uses claim `gpu-claim` and `log` does not.
fn pod_json(pod: &str, pod_uid: &str) -> Value {
    serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": pod, "namespace": "ns", "uid": pod_uid},
        "spec": {
            "containers": [
                {"name": "gpu", "resources": {"claims": [{"name": "gpus"}]}},
                {"name": "log"}
            ],
            "resourceClaims": [{"name": "gpus", "resourceClaimName": "gpu-claim"}]
        }
    })
}

/// The claim of `device` reserved for [`POD`], whose container `gpu` uses it and `log` does not,
/// on the fake API server; gpuhook-runtime reads the plugin's claim index, whose dir is returned.
fn claim_and_pod(api: &ApiServer, bench: &Bench, device: &str) -> PathBuf {
    let (pod, pod_uid) = (POD, POD_UID);
    let mut claim = gpuhook_dra::testkit::claim(
        "ns",
        "gpu-claim",
        CLAIM_UID,
        NODE,
        &[("gpu", device)],
        vec![],
    );
    claim["status"]["reservedFor"] =
        serde_json::json!([{"resource": "pods", "name": pod, "uid": pod_uid}]);
    api.add_claim(claim);
    api.add_pod(pod_json(pod, pod_uid));
    let index = bench.node.dir.join("plugin").join("pods");
    let mut config = std::fs::OpenOptions::new()
        .append(true)
        .open(&bench.node.gpuhook_config)
        .unwrap();
    std::io::Write::write_all(
        &mut config,
        format!("claim-index-dir = {index:?}\n").as_bytes(),
    )
    .unwrap();
    index
}

/// 3. Pod `joiner` joins the prepared claim (reservedFor; no NodePrepareResources): once the
///    plugin's watch has indexed it, its container `gpu` gets exactly the claim's GPU from
///    `CDI_devices` alone.
/// 4. Pod `intruder`, not reserved, names [`POD_UID`] (indexed) in its pod annotations
///    `io.kubernetes.cri.sandbox-uid` / `container-name`, which `pod_annotations = ["*"]` passes
///    through: containerd 1.6 sets its own CRI annotations after the pass-through ones
///    (`container_create_linux.go`, `containerSpec`), so the spec has the intruder's real UID
///    and its container `gpu` gets no GPU.
async fn joiner_and_intruder(
    bench: &mut Bench,
    api: &ApiServer,
    index: &Path,
    ids: &[String],
    want: &BTreeMap<String, String>,
) {
    let (joiner, joiner_uid) = ("joiner", "uid-joiner");
    api.add_pod(pod_json(joiner, joiner_uid));
    let mut claim = api.state.lock().unwrap().claims[&("ns".into(), "gpu-claim".into())].clone();
    claim["status"]["reservedFor"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"resource": "pods", "name": joiner, "uid": joiner_uid}));
    api.add_claim(claim);
    let file = index.join(format!("{joiner_uid}.json"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !file.exists() {
        assert!(std::time::Instant::now() < deadline, "joiner never indexed");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let opts = RunOptions {
        cdi_devices: ids.to_vec(),
        ..Default::default()
    };
    let saw = run(bench, joiner, "gpu", opts).await;
    assert_eq!(saw.gpu_nodes(), bench.only_gpus(&[0]), "{saw:?}");
    assert_eq!(&saw.env, want, "{saw:?}");

    let mut sandbox = bench.cri.sandbox_config("intruder");
    sandbox.annotations = [
        ("io.kubernetes.cri.sandbox-uid", POD_UID),
        ("io.kubernetes.cri.container-name", "gpu"),
        ("gpuhook.test/passed-through", "yes"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let config = container_config("gpu", REPORT, RunOptions::default());
    let ran = bench.cri.run_in(sandbox, config).await;
    assert_eq!(ran.exit_code, 0, "{}", ran.log);
    let a = &ran.spec_annotations;
    let get = |k: &str| a.get(k).and_then(Value::as_str);
    assert_eq!(
        get("gpuhook.test/passed-through"),
        Some("yes"),
        "pass-through: {a:?}"
    );
    assert_eq!(
        get("io.kubernetes.cri.sandbox-uid"),
        Some("uid-intruder"),
        "{a:?}"
    );
    assert_eq!(
        get("io.kubernetes.cri.container-name"),
        Some("gpu"),
        "{a:?}"
    );
    let saw = seen(&ran.log);
    assert!(
        saw.gpu_nodes().is_empty(),
        "the intruder got a GPU: {saw:?}"
    );
    assert!(!saw.env.contains_key("NVIDIA_VISIBLE_DEVICES"), "{saw:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_cdi_ids_through_containerd_1_6_cri() {
    if !ready("dra_cri") {
        return;
    }
    let t = tmp("dra");
    let dir = t.path();
    let claim_cdi = dir.join("dra-cdi");
    // An admin passes every pod annotation through (case 4; containerd matches the patterns with
    // Go's `path.Match`, where `*` stops at `/`).
    let every = ["*", "*/*"];
    let mut bench = Bench::start_with(dir, "rhel-a100", &[&claim_cdi], &every).await;
    assert_eq!(bench.node.profile.gpus.len(), 2);
    let api = ApiServer::start(NODE);
    let device = format!("gpu-{}", bench.node.profile.gpus[0].minor);
    let (pod, pod_uid) = (POD, POD_UID);
    let index = claim_and_pod(&api, &bench, &device);
    let plugin = DraPlugin::start(dir, &bench.node.root, &claim_cdi, &api);
    let (mut client, ids) = prepare(dir, &plugin).await;
    assert_eq!(
        ids,
        [format!("k8s.gpu.nvidia.com/claim={CLAIM_UID}-{device}")]
    );
    let spec_path = claim_cdi.join(format!("k8s.gpu.nvidia.com-claim_{CLAIM_UID}.json"));
    let spec: Value = serde_json::from_slice(&std::fs::read(&spec_path).unwrap()).unwrap();
    let want = spec_env(&spec);
    assert!(!want.is_empty(), "the claim spec sets env: {spec}");
    let index_file = index.join(format!("{pod_uid}.json"));
    assert!(index_file.exists(), "{}", plugin.log_text());

    // 1. CDI_devices only (a 1.31+ kubelet): containerd 1.6 drops the field; the claim index
    //    gives container `gpu` exactly the claim's GPU, and container `log` nothing.
    let only_cdi_devices = || RunOptions {
        cdi_devices: ids.clone(),
        ..Default::default()
    };
    let saw = run(&mut bench, pod, "gpu", only_cdi_devices()).await;
    assert_eq!(saw.gpu_nodes(), bench.only_gpus(&[0]), "{saw:?}");
    assert_eq!(saw.env, want, "{saw:?}");
    // The bench logs every container of pod `pod` to one file: start the second afresh.
    std::fs::remove_file(bench.cri.dir.join("pods").join(pod).join("ctr_0.log")).unwrap();
    let saw = run(&mut bench, pod, "log", RunOptions::default()).await;
    assert!(
        saw.gpu_nodes().is_empty(),
        "a container without the claim: {saw:?}\n{}",
        std::fs::read_to_string(&bench.node.gpuhook_log).unwrap_or_default()
    );
    assert!(!saw.env.contains_key("NVIDIA_VISIBLE_DEVICES"), "{saw:?}");

    joiner_and_intruder(&mut bench, &api, &index, &ids, &want).await;

    // 2. The same IDs as the 1.26–1.30 kubelet's container annotation: exactly the claim's GPU.
    let key = format!("cdi.k8s.io/{DRIVER}_{CLAIM_UID}");
    let saw = run(
        &mut bench,
        "kubelet-annotation",
        "gpu",
        RunOptions {
            annotations: vec![(key, ids.join(","))],
            ..Default::default()
        },
    )
    .await;
    assert_eq!(saw.gpu_nodes(), bench.only_gpus(&[0]), "{saw:?}");
    assert_eq!(saw.env, want, "{saw:?}");

    // NodeUnprepareResources removes the claim's spec and its index entry.
    let resp = client
        .node_unprepare_resources(api::NodeUnprepareResourcesRequest {
            claims: vec![dra_kubelet::claim("ns", "gpu-claim", CLAIM_UID)],
        })
        .await
        .unwrap()
        .into_inner();
    assert!(resp.claims[CLAIM_UID].error.is_empty(), "{resp:?}");
    assert!(!spec_path.exists(), "the claim's spec is removed");
    assert!(!index_file.exists(), "the claim's index entry is removed");
    assert!(api.state.lock().unwrap().refused.is_empty());
}
