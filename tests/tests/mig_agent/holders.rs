//! A pod the kubelet allocated a MIG device to (pod-resources `List`, served by a fake kubelet on
//! the node's socket) keeps that device: the change fails with the device, the pod and the fix,
//! the clients are restored and no GPU is touched; with `--drain` the layout is applied.

use std::path::Path;

use gpuhook_device_plugin::fake_pod_resources::serve_pod_resources as fake_kubelet;
use gpuhook_device_plugin::podresources::{
    ContainerDevices, ContainerResources, ListPodResourcesResponse, PodResources,
};

use super::*;

/// The MIG UUID of GPU 0's 3g.40gb device (seed 003's mixed-workload, as the profile has it).
fn uuid_3g(root: &Path) -> String {
    let loc = NvmlLocation::locate(root, None).unwrap();
    let mut b = NvmlBackend::new(Nvml::load(&loc).unwrap());
    let gpu = b.gpu(0).unwrap();
    let gi = gpu
        .instances
        .iter()
        .find(|g| gpu.profile_by_id(g.profile_id).unwrap().name == "3g.40gb")
        .expect("a 3g.40gb GPU instance");
    gi.cis[0].uuid.clone().unwrap()
}

fn one_pod(device_id: &str) -> ListPodResourcesResponse {
    ListPodResourcesResponse {
        pod_resources: vec![PodResources {
            name: "train-0".into(),
            namespace: "ml".into(),
            containers: vec![ContainerResources {
                name: "trainer".into(),
                devices: vec![ContainerDevices {
                    resource_name: "nvidia.com/mig-3g.40gb".into(),
                    device_ids: vec![device_id.to_string()],
                    topology: None,
                }],
            }],
        }],
    }
}

#[test]
fn a_pod_holding_a_mig_device_fails_the_change_until_drained() {
    let Some(s) = sim() else { return };
    let before = layouts(&s.root);
    let held = uuid_3g(&s.root);
    fake_kubelet(&s.pod_resources, one_pod(&held));
    let api = api(&s, "all-small", true);
    let mut a = agent(&s, &api, Duration::from_secs(10));
    let err = ran(a.step()).unwrap_err();
    for want in [
        "3g.40gb",
        held.as_str(),
        "pod ml/train-0 (container trainer, nvidia.com/mig-3g.40gb)",
        "delete the pod",
        "--drain",
    ] {
        assert!(err.contains(want), "{want:?} not in: {err}");
    }
    assert_eq!(layouts(&s.root), before, "no GPU touched");
    assert_eq!(api.label(STATE_LABEL).as_deref(), Some("failed"));
    assert!(api
        .annotation(REASON_ANNOTATION)
        .unwrap()
        .contains("pod ml/train-0"));
    assert_eq!(
        strs(&api.label_history(DP)),
        [Some(PAUSED), Some("true")],
        "the device plugin is restored"
    );

    let mut drained = agent_with(&s, &api, Duration::from_secs(10), true);
    assert_eq!(ran(drained.step()), Ok("success".into()));
    let small = layout(&[("1g.10gb", 7)]);
    assert_eq!(layouts(&s.root), [small.clone(), small]);
}

/// `gpuhook-mig-parted apply` run by hand checks the same holders as the agent: the MIG device
/// the kubelet gave a pod (pod-resources) stops the apply, naming the pod and the fix, and no GPU
/// is touched; with `--drain` the layout is applied.
#[test]
fn mig_parted_by_hand_keeps_a_pod_held_device_until_drained() {
    let Some(s) = sim() else { return };
    let before = layouts(&s.root);
    let held = uuid_3g(&s.root);
    fake_kubelet(&s.pod_resources, one_pod(&held));
    let apply = |drain: bool| {
        let mut c = std::process::Command::new(built("gpuhook-mig-parted"));
        c.arg("--driver-root").arg(&s.root).args(["apply", "-f"]);
        c.arg(&s.config)
            .args(["-c", "all-small", "--pod-resources-socket"]);
        c.arg(&s.pod_resources)
            .arg("--mps-root")
            .arg(s.root.join("no-mps"));
        c.arg("--host-proc").arg(&s.proc_root);
        if drain {
            c.arg("--drain");
        }
        c.env_remove("MIG_PARTED_CONFIG_FILE")
            .env_remove("MIG_PARTED_SELECTED_CONFIG")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    };
    let out = apply(false);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "a held device was destroyed: {stderr}"
    );
    for want in [held.as_str(), "pod ml/train-0", "delete the pod", "--drain"] {
        assert!(stderr.contains(want), "{want:?} not in: {stderr}");
    }
    assert_eq!(layouts(&s.root), before, "no GPU touched");

    let out = apply(true);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "--drain failed: {stderr}");
    let small = layout(&[("1g.10gb", 7)]);
    assert_eq!(layouts(&s.root), [small.clone(), small]);
}
