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

const A100_0: &str = "GPU-c4f82fda-f11d-4492-a176-950eab898aad";

/// `(GPU_I_ID, GPU_I_PROFILE)` of GPU 0's `DCGM_FI_DEV_FB_USED` series; `("", "")` for a
/// GPU-level one.
fn instances(p: &Page) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = p
        .of("DCGM_FI_DEV_FB_USED")
        .filter(|s| s.label("UUID") == Some(A100_0))
        .map(|s| {
            let l = |k| s.label(k).unwrap_or("").to_string();
            (l("GPU_I_ID"), l("GPU_I_PROFILE"))
        })
        .collect();
    v.sort();
    v
}

/// Saves GPU 0's layout as another process (mig-parted, nvidia-smi) would. Real NVML asks the
/// driver at every call, so a running client sees the change; the mock takes it up at its next
/// `nvmlInit` in the process, which a short-lived second NVML user here starts.
fn repartition(node: &Node, layout: &gpuhook_sim::mig_state::SimMigGpu) {
    gpuhook_sim::mig_state::save(node.dir.path(), A100_0, layout).unwrap();
    let loc = gpuhook_node::NvmlLocation::explicit(&node.lib);
    drop(gpuhook_node::Nvml::load(&loc).unwrap());
}

fn pair(gi: &str, profile: &str) -> (String, String) {
    (gi.to_string(), profile.to_string())
}

#[test]
fn a_mig_repartition_and_a_mode_switch_are_followed_without_a_restart() {
    use gpuhook_sim::mig_state::{SimCi, SimGi, SimMigGpu};
    let node = Node::new("a100-mig-mixed");
    let state = start_in_process(&node, &["-c", "100"]);
    let before = page_when(&state, |p| instances(p).len() == 3);
    let gis = instances(&before);
    assert!(gis.contains(&pair("2", "3g.40gb")), "{gis:?}");
    assert!(gis.contains(&pair("3", "2g.20gb")), "{gis:?}");

    // The 2g.20gb instances destroyed, a 1g.10gb created (GI profile ids: 3g.40gb 9, 1g.10gb 19,
    // `NVML_GPU_INSTANCE_PROFILE_*`, as sim/src/mig_catalog.rs lists them).
    let gi = |id, profile_id, start, size, slices, uuid: &str| SimGi {
        id,
        profile_id,
        start,
        size,
        cis: vec![SimCi {
            id: 0,
            profile: profile_id,
            slices,
            start: 0,
            uuid: uuid.into(),
        }],
    };
    let mut layout = SimMigGpu {
        mig_enabled: true,
        pending: None,
        instances: vec![
            gi(2, 9, 0, 4, 3, "MIG-ae18ffb7-f9f1-fb51-5ea5-0879a2b7053a"),
            gi(13, 19, 6, 1, 1, "MIG-0d0c6f53-0000-4000-8000-000000000013"),
        ],
        serial: 1,
    };
    repartition(&node, &layout);
    let want = vec![pair("13", "1g.10gb"), pair("2", "3g.40gb")];
    page_when(&state, |p| instances(p) == want);

    // MIG mode off (after the reset): one GPU-level series, no instance labels.
    layout.mig_enabled = false;
    layout.instances.clear();
    repartition(&node, &layout);
    let off = page_when(&state, |p| instances(p) == vec![pair("", "")]);
    assert_eq!(
        off.of("DCGM_FI_DEV_FB_USED")
            .filter(|s| s.label("UUID") == Some(A100_0))
            .count(),
        1
    );
}
