//! Per-pod usage of MIG instances: memory per pod from the MIG device's process list; no
//! utilization shares (NVML has no per-process utilization on MIG).
// Test support: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;

#[test]
fn pods_on_mig_instances_get_memory_shares_and_no_utilization() {
    let node = Node::new("a100-mig-mixed");
    let proc_root = node.dir.path().join("proc");
    let c = cid('c');
    fake_proc(
        &proc_root,
        2001,
        &pod_cgroup("77777777-2222-3333-4444-555555555555", &c),
    );
    node.state(
        "processes-MIG-ae18ffb7-f9f1-fb51-5ea5-0879a2b7053a",
        "2001 compute 4000 80\n",
    );
    node.state(
        "telemetry-MIG-ae18ffb7-f9f1-fb51-5ea5-0879a2b7053a",
        "fb_used_mib 96\n",
    );
    let state = start_in_process(&node, &["-k", "-c", "100"]);
    name_pods(&state, &[(&c, "ml", "trainer", "main")]);
    let page = page_when(&state, |p| p.of("gpuhook_pod_gpu_processes").count() >= 1);
    let pod = page.one(
        "gpuhook_pod_fb_used",
        &[("GPU_I_ID", "2"), ("pod", "trainer")],
    );
    assert_eq!(pod.f(), 4000.0);
    assert_eq!(pod.label("GPU_I_PROFILE"), Some("3g.40gb"));
    assert_eq!(
        page.one("gpuhook_pod_fb_used", &[("GPU_I_ID", "2"), ("pod", "")])
            .f(),
        96.0
    );
    assert_eq!(
        page.one("DCGM_FI_DEV_FB_USED", &[("GPU_I_ID", "2")]).value,
        "4096"
    );
    assert_eq!(page.of("gpuhook_pod_gpu_util").count(), 0);
}
