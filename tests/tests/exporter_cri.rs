//! Per-pod GPU usage end to end: two pods started through containerd 1.6's CRI plugin (the rig of
//! `device_plugin_cri.rs`: a private containerd, cgroupfs driver on cgroup v1, host network),
//! their containers' real host PIDs scripted as GPU processes of one GPU of a simulated dgx-h100
//! (the mock NVML's `processes-<uuid>` file: `pid kind MiB sm%`), and `gpuhook-exporter -k`
//! naming them through containerd's real CRI socket and the real `/proc`: the chain NVML process
//! → `/proc/<pid>/cgroup` → container id → `ListContainers` (the kubelet's labels) → pod.
//!
//! Expected, from the exporter's contract (exporter/README.md "Per-pod usage of shared GPUs"):
//! each pod's `gpuhook_pod_fb_used` is its process's memory and `gpuhook_pod_gpu_util` its SM
//! sample, with the pod's `namespace`/`pod`/`container`; the series with empty pod labels holds
//! the rest, so each figure's pod series sum to the device's `DCGM_FI_DEV_FB_USED` /
//! `DCGM_FI_DEV_GPU_UTIL` (the mock reports device memory used as `fb_used_mib` plus its
//! processes' memory, `sim/mock-nvml/src/telemetry.rs:memory`).
//!
//! Cleanup: pods are removed through CRI on the normal path; on any path the exporter is killed
//! first, then the rig kills every task and container with `ctr` and stops containerd, then the
//! temp dir goes. Nothing is written outside the temp dir (the containers' cgroups are
//! containerd's own `/k8s.io/<id>`, removed by runc with the containers).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test crate: a panic is a test failure

mod cdi_support;
mod device_plugin_cri_support;
#[path = "exporter_cri/support.rs"]
mod support;

use device_plugin_cri_support::rig::{ready, tmp, Bench};
use support::{on, remove, run_sleeping, Exporter, Pod, Series};

/// The figures scripted on the GPU: memory outside processes, device utilization.
const HOST_FB_MIB: f64 = 300.0;
const DEVICE_UTIL: f64 = 60.0;

/// (namespace, pod, container, MiB, SM %) of the two pods.
const PODS: [(&str, &str, &str, u64, u64); 2] = [
    ("team-a", "trainer", "main", 1500, 20),
    ("team-b", "notebook", "lab", 900, 30),
];

fn sum(series: &[&Series]) -> f64 {
    series.iter().map(|s| s.value).sum()
}

/// Scripts the pods' PIDs as compute processes of GPU 2 (memory and SM samples) and the GPU's
/// own figures in the mock NVML's state; returns the GPU's UUID.
fn script_gpu(bench: &Bench, pods: &[Pod]) -> String {
    let p = &bench.node.profile;
    let uuid = p.gpus[2].uuid.clone();
    let state = bench
        .node
        .root
        .join(p.lib_dir.trim_start_matches('/'))
        .join("gpuhook-sim-state");
    std::fs::create_dir_all(&state).unwrap();
    let procs: String = pods
        .iter()
        .zip(PODS)
        .map(|(pod, (_, _, _, mib, sm))| format!("{} compute {mib} {sm}\n", pod.pid))
        .collect();
    std::fs::write(state.join(format!("processes-{uuid}")), procs).unwrap();
    std::fs::write(
        state.join(format!("telemetry-{uuid}")),
        format!("gpu_util {DEVICE_UTIL}\nfb_used_mib {HOST_FB_MIB}\n"),
    )
    .unwrap();
    uuid
}

/// Each pod's series on `uuid` carry its labels and its process's figures; with the rest series
/// they sum to the device's; no pod series on another GPU.
fn check_page(page: &[Series], uuid: &str, log: &str) {
    let fb = on(page, "gpuhook_pod_fb_used", uuid);
    let util = on(page, "gpuhook_pod_gpu_util", uuid);
    let procs = on(page, "gpuhook_pod_gpu_processes", uuid);
    for (ns, name, container, mib, sm) in PODS {
        for (series, want) in [(&fb, mib), (&util, sm), (&procs, 1)] {
            let mine: Vec<&&Series> = series
                .iter()
                .filter(|s| s.label("pod") == Some(name))
                .collect();
            assert_eq!(mine.len(), 1, "{name}: {mine:?}\n{log}");
            assert_eq!(mine[0].label("namespace"), Some(ns), "{:?}", mine[0]);
            assert_eq!(mine[0].label("container"), Some(container), "{:?}", mine[0]);
            assert_eq!(mine[0].value, f64::from(u32::try_from(want).unwrap()));
        }
    }
    let device_fb = on(page, "DCGM_FI_DEV_FB_USED", uuid);
    let device_util = on(page, "DCGM_FI_DEV_GPU_UTIL", uuid);
    assert_eq!(device_fb.len(), 1, "one device series: {device_fb:?}");
    assert_eq!(device_util.len(), 1, "one device series: {device_util:?}");
    assert_eq!(device_fb[0].value, 1500.0 + 900.0 + HOST_FB_MIB);
    assert_eq!(device_util[0].value, DEVICE_UTIL);
    assert_eq!(
        sum(&fb),
        device_fb[0].value,
        "pod memory sums to the device's"
    );
    assert_eq!(
        sum(&util),
        device_util[0].value,
        "pod shares sum to the device's"
    );
    let rest = |series: &[&Series]| -> Vec<f64> {
        series
            .iter()
            .filter(|s| s.label("pod") == Some(""))
            .map(|s| s.value)
            .collect()
    };
    assert_eq!(rest(&fb), [HOST_FB_MIB], "{fb:?}");
    assert_eq!(rest(&util), [DEVICE_UTIL - 20.0 - 30.0], "{util:?}");
    let named = page
        .iter()
        .filter(|s| s.name.starts_with("gpuhook_pod_") && s.label("pod") != Some(""));
    for s in named {
        assert_eq!(s.label("UUID"), Some(uuid), "no pod on other GPUs: {s:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_started_through_containerd_cri_get_their_share_of_one_gpu() {
    if !ready("exporter_cri") {
        return;
    }
    let tmp = tmp("exporter");
    let mut bench = Bench::start(tmp.path(), "dgx-h100", &[]).await;
    let mut pods = Vec::new();
    for (ns, name, container, _, _) in PODS {
        pods.push(run_sleeping(&mut bench.cri, ns, name, container).await);
    }
    for pod in &pods {
        // containerd 1.6's cgroupfs driver without a cgroup parent: `<n>:<controllers>:/k8s.io/<id>`.
        let cgroup = std::fs::read_to_string(format!("/proc/{}/cgroup", pod.pid)).unwrap();
        let path = format!("/k8s.io/{}", pod.container);
        assert!(cgroup.lines().any(|l| l.ends_with(&path)), "{cgroup}");
    }
    let uuid = script_gpu(&bench, &pods);

    let exporter = Exporter::start(tmp.path(), &bench.node.root, &bench.cri.daemon.socket);
    let page = exporter.wait_for(|page| {
        let named = on(page, "gpuhook_pod_fb_used", &uuid);
        PODS.iter()
            .all(|(_, pod, ..)| named.iter().any(|s| s.label("pod") == Some(pod)))
    });
    check_page(&page, &uuid, &exporter.log_text());

    drop(exporter);
    for pod in &pods {
        remove(&mut bench.cri, pod).await;
        let cmdline = std::fs::read_to_string(format!("/proc/{}/cmdline", pod.pid));
        assert!(
            !cmdline.is_ok_and(|c| c.starts_with("sleep")),
            "{} still runs after RemovePodSandbox",
            pod.name
        );
    }
}
