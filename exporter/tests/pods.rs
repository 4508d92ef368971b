//! Per-pod usage of a time-sliced and MPS-shared GPU: processes NVML lists (scripted in the mock),
//! their containers from `/proc/<pid>/cgroup` (a fake /proc), pods named as the CRI runtime
//! names them. Each pod's series hold its processes' figures and a device's series sum to its
//! device series; the device series stay one per GPU.
// Test support: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;

const H100_0: &str = "GPU-054b5817-d8d5-cb0c-e645-7b685ed85ca6";

#[test]
fn each_pod_gets_its_processes_share_of_a_shared_gpu() {
    let node = Node::new("dgx-h100");
    let proc_root = node.dir.path().join("proc");
    let (a, b) = (cid('a'), cid('b'));
    fake_proc(
        &proc_root,
        1001,
        &pod_cgroup("11111111-2222-3333-4444-555555555555", &a),
    );
    fake_proc(
        &proc_root,
        1002,
        &pod_cgroup("11111111-2222-3333-4444-555555555555", &a),
    );
    fake_proc(
        &proc_root,
        1003,
        &pod_cgroup("66666666-2222-3333-4444-555555555555", &b),
    );
    fake_proc(
        &proc_root,
        1004,
        "0::/user.slice/user-0.slice/session-1.scope\n",
    );
    // Two time-sliced processes of pod a, an MPS client of pod b, a host process.
    node.state(
        &format!("processes-{H100_0}"),
        "1001 compute 2000 30\n1002 compute 1000 10\n1003 mps 500 5\n1004 compute 700 0\n",
    );
    node.state(
        &format!("telemetry-{H100_0}"),
        "gpu_util 50\nfb_used_mib 100\n",
    );
    let state = start_in_process(&node, &["-k", "-c", "100"]);
    name_pods(
        &state,
        &[(&a, "team", "a", "main"), (&b, "team", "b", "worker")],
    );
    let page = page_when(&state, |p| {
        p.of("gpuhook_pod_gpu_processes").count() >= 3 && p.of("DCGM_FI_DEV_FB_USED").count() == 8
    });
    let on = |pod: &'static str| [("UUID", H100_0), ("pod", pod)];

    // Memory: NVML's used memory of the device is 100 + 2000 + 1000 + 500 + 700 MiB.
    assert_eq!(
        page.one("DCGM_FI_DEV_FB_USED", &[("UUID", H100_0)]).value,
        "4300"
    );
    assert_eq!(page.one("gpuhook_pod_fb_used", &on("a")).f(), 3000.0);
    assert_eq!(page.one("gpuhook_pod_fb_used", &on("b")).f(), 500.0);
    assert_eq!(page.one("gpuhook_pod_fb_used", &on("")).f(), 800.0);
    // Utilization: SM samples 30 + 10 (a) and 5 (b) of a device at 50 %.
    assert_eq!(page.one("gpuhook_pod_gpu_util", &on("a")).f(), 40.0);
    assert_eq!(page.one("gpuhook_pod_gpu_util", &on("b")).f(), 5.0);
    assert_eq!(page.one("gpuhook_pod_gpu_util", &on("")).f(), 5.0);
    for (metric, device) in [
        ("gpuhook_pod_fb_used", 4300.0),
        ("gpuhook_pod_gpu_util", 50.0),
    ] {
        let sum: f64 = page
            .of(metric)
            .filter(|s| s.label("UUID") == Some(H100_0))
            .map(|s| s.f())
            .sum();
        assert!((sum - device).abs() < 1e-6, "{metric}: {sum} != {device}");
    }
    labels_and_device_series(&page);
}

/// Pod series carry the device's labels then container, namespace, pod (sorted, after the label
/// counters); device series are never copied per pod.
fn labels_and_device_series(page: &Page) {
    let on = |pod: &'static str| [("UUID", H100_0), ("pod", pod)];
    let a_procs = page.one("gpuhook_pod_gpu_processes", &on("a"));
    assert_eq!(a_procs.value, "2");
    assert_eq!(a_procs.label("namespace"), Some("team"));
    assert_eq!(a_procs.label("container"), Some("main"));
    assert_eq!(page.one("gpuhook_pod_gpu_processes", &on("")).value, "1");
    // Labels: the device's, then container, namespace, pod (sorted, after the label counters).
    let names: Vec<&str> = a_procs.labels.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        names,
        [
            "gpu",
            "UUID",
            "pci_bus_id",
            "device",
            "modelName",
            "DCGM_FI_DRIVER_VERSION",
            "container",
            "namespace",
            "pod"
        ]
    );
    // Device series are never copied per pod.
    assert_eq!(page.of("DCGM_FI_DEV_FB_USED").count(), 8);
    assert!(page
        .of("DCGM_FI_DEV_FB_USED")
        .all(|s| s.label("pod").is_none()));
}
