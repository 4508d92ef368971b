#![allow(clippy::unwrap_used)]

use super::*;
use crate::labels::{CONFIG_LABEL, PAUSED};
use crate::layout::Preview;
use crate::test_support::{gpu, reconciler, FakeHost, FakeLayout, FakeNode};

const DP: &str = "nvidia.com/gpu.deploy.device-plugin";
const DCGM: &str = "nvidia.com/gpu.deploy.dcgm";
const GFD: &str = "nvidia.com/gpu.deploy.gpu-feature-discovery";
const MPS: &str = "nvidia.com/gpu.deploy.mps-daemon";

/// No deploy label left at `paused-for-mig-change` and no pause record.
fn assert_restored(node: &FakeNode) {
    let s = node.0.lock().unwrap();
    let paused: Vec<_> = s.meta.labels.iter().filter(|(_, v)| *v == PAUSED).collect();
    assert!(paused.is_empty(), "left paused: {paused:?}");
    assert!(!s.meta.annotations.contains_key(PAUSED_ANNOTATION));
}

#[test]
fn label_change_pauses_the_holders_applies_refreshes_and_restores_exactly() {
    let node =
        FakeNode::with_labels(&[(CONFIG_LABEL, "all-1g.10gb"), (DP, "true"), (DCGM, "false")]);
    // gpuhook's device plugin and gpu-feature-discovery (label absent: deployed without the
    // operator) hold the GPU; both stop after a few polls.
    let host = FakeHost::with_proc(DP, "gpuhook-device-", Some(3));
    host.0.lock().unwrap().procs.push((
        Proc {
            label: GFD,
            pid: 7,
            comm: "gpu-feature-dis".into(),
        },
        Some(2),
    ));
    let layout = FakeLayout::changing();
    let mut r = reconciler(&node, &layout, &host);
    assert_eq!(r.run("all-1g.10gb"), Ok(State::Success));

    assert_eq!(node.states(), ["pending", "success"]);
    let patches = node.patches();
    // pending, pause (with the record), restore, success.
    let (paused, record) = &patches[1];
    assert_eq!(paused.get(DP), Some(&Some(PAUSED.to_string())));
    assert_eq!(paused.get(GFD), Some(&Some(PAUSED.to_string())));
    assert!(!paused.contains_key(DCGM), "false stays false");
    let rec = Pause::from_record(record[PAUSED_ANNOTATION].as_deref().unwrap()).unwrap();
    assert_eq!(rec.previous[DP], Some("true".into()));
    assert_eq!(rec.previous[GFD], None);
    assert_eq!(layout.applied(), ["all-1g.10gb"]);
    assert_eq!(host.0.lock().unwrap().cdi_refreshes, 1);
    assert_eq!(node.label(DP).as_deref(), Some("true"));
    assert_eq!(node.label(GFD), None, "an absent label is removed again");
    assert_eq!(node.label(DCGM).as_deref(), Some("false"));
    assert_restored(&node);
    assert!(node
        .events()
        .iter()
        .any(|(w, r, _)| !w && r == "MIGConfigApplied"));
}

#[test]
fn an_applied_config_succeeds_without_pausing_anything() {
    let node = FakeNode::with_labels(&[(DP, "true")]);
    let (layout, host) = (FakeLayout::default(), FakeHost::default());
    let mut r = reconciler(&node, &layout, &host);
    assert_eq!(r.run("all-disabled"), Ok(State::Success));
    assert_eq!(node.states(), ["success"]);
    assert_eq!(node.patches().len(), 1);
    assert!(layout.applied().is_empty());
}

#[test]
fn invalid_or_unknown_config_fails_with_the_reason_gpu_untouched_nothing_paused() {
    let node = FakeNode::with_labels(&[(DP, "true")]);
    let host = FakeHost::with_proc(DP, "nvidia-device-p", None);
    let layout = FakeLayout::default();
    let why = "/mig-parted-config/config.yaml: selected mig-config not present: nope";
    layout.0.lock().unwrap().preview = Some(Err(why.into()));
    let mut r = reconciler(&node, &layout, &host);
    assert_eq!(r.run("nope"), Err(why.to_string()));
    assert_eq!(node.states(), ["failed"]);
    assert!(layout.applied().is_empty());
    assert_eq!(node.label(DP).as_deref(), Some("true"));
    assert_eq!(node.annotation(REASON_ANNOTATION).as_deref(), Some(why));
    let events = node.events();
    assert!(events
        .iter()
        .any(|(w, r, m)| *w && r == "MIGConfigFailed" && m.contains(why)));
}

#[test]
fn a_client_that_never_stops_times_out_restores_and_fails() {
    let node = FakeNode::with_labels(&[(DP, "true"), (DCGM, "true")]);
    let host = FakeHost::with_proc(DP, "nvidia-device-p", None);
    let layout = FakeLayout::changing();
    let mut r = reconciler(&node, &layout, &host);
    let err = r.run("all-1g.10gb").unwrap_err();
    assert!(
        err.contains("timed out") && err.contains("nvidia-device-p"),
        "{err}"
    );
    assert_eq!(node.states(), ["pending", "failed"]);
    assert!(layout.applied().is_empty(), "the GPU is not touched");
    assert_eq!(node.label(DP).as_deref(), Some("true"));
    assert_eq!(node.label(DCGM).as_deref(), Some("true"));
    assert_restored(&node);
}

#[test]
fn apply_and_cdi_failures_restore_and_fail() {
    for cdi_fails in [false, true] {
        let node = FakeNode::with_labels(&[(DP, "true")]);
        let host = FakeHost::with_proc(DP, "nvidia-device-p", Some(1));
        host.0.lock().unwrap().cdi_fails = cdi_fails;
        let layout = FakeLayout::changing();
        if !cdi_fails {
            layout.0.lock().unwrap().apply = Some(Err("GPU 0: no MIG profile 9g.99gb".into()));
        }
        let err = reconciler(&node, &layout, &host).run("x").unwrap_err();
        let want = if cdi_fails { "cdi generate" } else { "9g.99gb" };
        assert!(err.contains(want), "{err}");
        assert_eq!(node.states(), ["pending", "failed"]);
        assert_eq!(node.label(DP).as_deref(), Some("true"));
        assert_restored(&node);
    }
}

#[test]
fn a_failed_restore_is_done_first_by_the_next_run() {
    let node = FakeNode::with_labels(&[(DP, "true"), (DCGM, "true")]);
    let host = FakeHost::with_proc(DP, "nvidia-device-p", None);
    let layout = FakeLayout::changing();
    // `pending` and the pause go through; the API server then refuses the three restores.
    {
        let mut s = node.0.lock().unwrap();
        s.ok_before_failing = 2;
        s.fail_patches = 3;
    }
    let mut r = reconciler(&node, &layout, &host);
    let err = r.run("x").unwrap_err();
    assert!(
        err.contains("timed out") && err.contains("cannot restore"),
        "{err}"
    );
    assert_eq!(node.label(STATE_LABEL).as_deref(), Some("failed"));
    assert_eq!(node.label(DP).as_deref(), Some(PAUSED));
    assert!(
        node.annotation(PAUSED_ANNOTATION).is_some(),
        "the record stays on the Node"
    );
    // The next run (the agent's retry, or a restarted pod) restores before anything else, even
    // when the config is now bad.
    layout.0.lock().unwrap().preview = Some(Err("bad config".into()));
    assert_eq!(r.run("x"), Err("bad config".to_string()));
    assert_eq!(node.label(DP).as_deref(), Some("true"));
    assert_eq!(node.label(DCGM).as_deref(), Some("true"));
    assert_restored(&node);
}

#[test]
fn labels_left_paused_by_nvidias_manager_are_restored_mig_parted_485() {
    // Every deploy label paused, state pending, no record: NVIDIA's manager timed out waiting
    // for pod deletion and returned without restoring.
    let node = FakeNode::with_labels(&[
        (DP, PAUSED),
        (GFD, PAUSED),
        (DCGM, PAUSED),
        (STATE_LABEL, "pending"),
    ]);
    let (l, h) = (FakeLayout::default(), FakeHost::default());
    assert_eq!(reconciler(&node, &l, &h).run("x"), Ok(State::Success));
    for k in [DP, GFD, DCGM] {
        assert_eq!(node.label(k).as_deref(), Some("true"), "{k}");
    }
}

#[test]
fn an_mps_daemon_not_serving_a_changed_gpu_is_not_paused() {
    let node = FakeNode::with_labels(&[(MPS, "true"), (DP, "true")]);
    let host = FakeHost::default();
    let layout = FakeLayout::changing();
    assert_eq!(
        reconciler(&node, &layout, &host).run("x"),
        Ok(State::Success)
    );
    let (paused, _) = &node.patches()[1];
    assert!(
        paused.contains_key(DP) && !paused.contains_key(MPS),
        "{paused:?}"
    );
}

fn pending_layout() -> FakeLayout {
    let l = FakeLayout::default();
    l.0.lock().unwrap().preview = Some(Ok(Preview {
        changes: vec![],
        pending_reset: vec![gpu(1)],
    }));
    l
}

#[test]
fn a_pending_mode_change_fails_without_reboot_and_reboots_once_with_it() {
    let (node, layout, host) = (FakeNode::default(), pending_layout(), FakeHost::default());
    let err = reconciler(&node, &layout, &host)
        .run("all-enabled")
        .unwrap_err();
    assert!(
        err.contains("waits for a GPU reset or a reboot") && err.contains("GPU 1"),
        "{err}"
    );
    assert_eq!(host.0.lock().unwrap().reboots, 0);

    let mut r = reconciler(&node, &layout, &host);
    r.settings.with_reboot = true;
    assert_eq!(r.run("all-enabled"), Ok(State::Rebooting));
    assert_eq!(host.0.lock().unwrap().reboots, 1);
    assert_eq!(node.label(STATE_LABEL).as_deref(), Some("rebooting"));
    assert_eq!(
        node.annotation(REBOOT_ANNOTATION).as_deref(),
        Some("all-enabled")
    );
    // After the reboot the mode still waits: NVIDIA's error, no second reboot.
    let err = r.run("all-enabled").unwrap_err();
    assert!(err.contains("did not take effect after rebooting"), "{err}");
    let err = r.run("all-enabled").unwrap_err();
    assert!(err.contains("no second reboot"), "{err}");
    assert_eq!(host.0.lock().unwrap().reboots, 1, "never a reboot loop");
    assert_eq!(node.label(STATE_LABEL).as_deref(), Some("failed"));
}

#[test]
fn sigterm_during_the_wait_restores_at_once() {
    let node = FakeNode::with_labels(&[(DP, "true")]);
    let host = FakeHost::with_proc(DP, "nvidia-device-p", None);
    let layout = FakeLayout::changing();
    let mut r = reconciler(&node, &layout, &host);
    r.settings.client_timeout = std::time::Duration::from_secs(3600);
    r.settings
        .stop
        .store(true, std::sync::atomic::Ordering::Relaxed);
    let err = r.run("x").unwrap_err();
    assert!(err.contains("SIGTERM"), "{err}");
    assert!(layout.applied().is_empty());
    assert_eq!(node.label(DP).as_deref(), Some("true"));
    assert_restored(&node);
}
