#![allow(clippy::unwrap_used)]

use super::*;
use crate::test_support::{reconciler, FakeHost, FakeLayout, FakeNode};

fn agent(node: &FakeNode, layout: &FakeLayout) -> Agent {
    let timing = Timing {
        poll: Duration::from_millis(1),
        min_backoff: Duration::from_millis(40),
        max_backoff: Duration::from_millis(100),
    };
    Agent::new(reconciler(node, layout, &FakeHost::default()), timing)
}

fn ran(step: &Step) -> Option<(&str, bool)> {
    match step {
        Step::Ran { config, result } => Some((config.as_str(), result.is_ok())),
        Step::Idle => None,
    }
}

#[test]
fn runs_at_start_then_only_on_change_and_never_on_an_empty_label() {
    let node = FakeNode::with_labels(&[(CONFIG_LABEL, "a")]);
    let layout = FakeLayout::changing();
    let mut a = agent(&node, &layout);
    assert_eq!(ran(&a.step()), Some(("a", true)));
    assert_eq!(a.step(), Step::Idle);
    node.set_label(CONFIG_LABEL, Some(""));
    assert_eq!(a.step(), Step::Idle);
    node.set_label(CONFIG_LABEL, Some("a"));
    assert_eq!(
        ran(&a.step()),
        Some(("a", true)),
        "removed and put back: runs"
    );
    assert_eq!(layout.applied(), ["a", "a"]);
}

#[test]
fn a_relabel_during_an_apply_is_queued_and_applied_next() {
    let node = FakeNode::with_labels(&[(CONFIG_LABEL, "mixed-workload")]);
    let layout = FakeLayout::changing();
    let n = node.clone();
    layout.0.lock().unwrap().during_apply = Some(Box::new(move || {
        n.set_label(CONFIG_LABEL, Some("all-small"));
    }));
    let mut a = agent(&node, &layout);
    assert_eq!(ran(&a.step()), Some(("mixed-workload", true)));
    assert_eq!(ran(&a.step()), Some(("all-small", true)));
    assert_eq!(a.step(), Step::Idle);
    assert_eq!(layout.applied(), ["mixed-workload", "all-small"]);
    assert_eq!(node.states(), ["pending", "success", "pending", "success"]);
}

#[test]
fn a_failure_is_retried_with_growing_backoff_until_it_succeeds() {
    let node = FakeNode::with_labels(&[(CONFIG_LABEL, "a")]);
    let layout = FakeLayout::changing();
    layout.0.lock().unwrap().apply = Some(Err("NVML busy".into()));
    let mut a = agent(&node, &layout);
    let t0 = Instant::now();
    assert_eq!(ran(&a.step()), Some(("a", false)));
    let first = a.retry_at().unwrap() - t0;
    assert!(first >= Duration::from_millis(40), "{first:?}");
    assert_eq!(a.step(), Step::Idle, "not before the backoff");
    std::thread::sleep(Duration::from_millis(45));
    let t1 = Instant::now();
    assert_eq!(ran(&a.step()), Some(("a", false)));
    assert!(
        a.retry_at().unwrap() - t1 >= Duration::from_millis(80),
        "doubled"
    );
    layout.0.lock().unwrap().apply = Some(Ok(vec![]));
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(ran(&a.step()), Some(("a", true)));
    assert_eq!(a.retry_at(), None);
    assert_eq!(
        node.states(),
        ["pending", "failed", "pending", "failed", "pending", "success"]
    );
}
