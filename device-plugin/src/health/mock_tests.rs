//! The monitor against the mock NVML through the real loading path (`Nvml::load`): faults are
//! injected the way the simulator documents (`<libdir>/gpuhook-sim-state/events`, `lost-<uuid>`)
//! and must reach the channel within a second.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use gpuhook_node::{Nvml, NvmlLocation};
use tokio::sync::mpsc;

use super::*;

const GPU0: &str = "GPU-a100a100-0000-4000-8000-000000000000";
const GPU1: &str = "GPU-a100a100-0000-4000-8000-000000000001";
const MIG_A: &str = "MIG-11111111-2222-5333-8444-555555555555";
const MIG_B: &str = "MIG-66666666-7777-5888-9999-aaaaaaaaaaaa";

/// GPU 0 with MIG (4g.40gb at GI 1, 1g.10gb at GI 11), GPU 1 without (the shared test node).
const PROFILE: &str = include_str!("../../../sim/testdata/own-a100-partial.toml");

/// `target/<profile>/libgpuhook_mock_nvml.so`, next to the test's `deps/` directory.
fn mock_lib() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let dir = exe.parent().and_then(Path::parent).expect("target dir");
    let lib = dir.join("libgpuhook_mock_nvml.so");
    assert!(
        lib.is_file(),
        "{} is missing: build the mock first (`cargo build -p gpuhook-mock-nvml`)",
        lib.display()
    );
    lib
}

/// A private copy of the mock with a profile beside it, loaded through `Nvml::load`.
pub(crate) struct Node {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) nvml: Arc<Nvml>,
}

impl Node {
    fn new() -> Node {
        Node::with_profile(PROFILE)
    }

    pub(crate) fn with_profile(profile: &str) -> Node {
        let dir = tempfile::tempdir().expect("tempdir");
        let real = dir.path().join("libnvidia-ml.so.1");
        std::fs::copy(mock_lib(), &real).expect("copy mock");
        std::fs::write(dir.path().join("gpuhook-sim-profile.toml"), profile).expect("profile");
        std::fs::create_dir_all(dir.path().join("gpuhook-sim-state")).expect("state dir");
        let nvml = Nvml::load(&NvmlLocation::explicit(&real)).expect("load the mock");
        Node {
            dir,
            nvml: Arc::new(nvml),
        }
    }

    fn inject(&self, line: &str) {
        let path = self.dir.path().join("gpuhook-sim-state/events");
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .expect("open events");
        writeln!(f, "{line}").expect("append event");
    }

    fn lost_flag(&self, uuid: &str) -> PathBuf {
        self.dir
            .path()
            .join(format!("gpuhook-sim-state/lost-{uuid}"))
    }
}

fn watched() -> Vec<WatchedGpu> {
    let mig = |uuid: &str, gi| WatchedMig {
        uuid: uuid.into(),
        gi,
        ci: 0,
    };
    vec![
        WatchedGpu {
            uuid: GPU0.into(),
            migs: vec![mig(MIG_A, 1), mig(MIG_B, 11)],
        },
        WatchedGpu {
            uuid: GPU1.into(),
            migs: Vec::new(),
        },
    ]
}

fn config(hold_ms: u64) -> HealthConfig {
    HealthConfig {
        xids: XidFilter::from_values("", ""),
        wait: Duration::from_millis(100),
        probe_interval: Duration::from_millis(100),
        xid_hold: Duration::from_millis(hold_ms),
    }
}

/// The next `n` changes, each within one second of the previous.
async fn next(
    rx: &mut mpsc::Receiver<HealthChange>,
    n: usize,
) -> Vec<(String, Option<String>, bool)> {
    let mut out = Vec::new();
    for _ in 0..n {
        let change = tokio::time::timeout(Duration::from_secs(1), rx.recv())
            .await
            .expect("a health change within 1 s")
            .expect("channel open");
        out.push((change.gpu_uuid, change.mig_uuid, change.healthy));
    }
    out.sort();
    out
}

fn key(gpu: &str, mig: Option<&str>, healthy: bool) -> (String, Option<String>, bool) {
    (gpu.into(), mig.map(Into::into), healthy)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xid_marks_gpu_then_recovers() {
    let node = Node::new();
    let (tx, mut rx) = mpsc::channel(16);
    let monitor = HealthMonitor::start(Arc::clone(&node.nvml), watched(), config(300), tx)
        .expect("monitor starts");
    // Ignored by default (application error): nothing arrives.
    node.inject(&format!("xid {GPU1} 13"));
    assert!(tokio::time::timeout(Duration::from_millis(400), rx.recv())
        .await
        .is_err());
    let injected = std::time::Instant::now();
    node.inject(&format!("xid {GPU1} 48"));
    assert_eq!(next(&mut rx, 1).await, [key(GPU1, None, false)]);
    let latency = injected.elapsed();
    eprintln!("injected Xid reached the channel after {latency:?}");
    assert!(latency < Duration::from_secs(1), "{latency:?}");
    // Comes back after the hold, at the next probe.
    assert_eq!(next(&mut rx, 1).await, [key(GPU1, None, true)]);
    monitor.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mig_xid_marks_only_its_instance_and_gpu_xid_marks_all() {
    let node = Node::new();
    let (tx, mut rx) = mpsc::channel(16);
    let monitor = HealthMonitor::start(Arc::clone(&node.nvml), watched(), config(60_000), tx)
        .expect("monitor starts");
    node.inject(&format!("xid {MIG_B} 48"));
    assert_eq!(next(&mut rx, 1).await, [key(GPU0, Some(MIG_B), false)]);
    // An Xid of the whole GPU: the GPU and the MIG device not yet marked.
    node.inject(&format!("xid {GPU0} 94"));
    let got = next(&mut rx, 2).await;
    assert_eq!(got, [key(GPU0, None, false), key(GPU0, Some(MIG_A), false)]);
    monitor.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_gpu_is_unhealthy_until_it_answers_again() {
    let node = Node::new();
    let (tx, mut rx) = mpsc::channel(16);
    let monitor = HealthMonitor::start(Arc::clone(&node.nvml), watched(), config(60_000), tx)
        .expect("monitor starts");
    std::fs::write(node.lost_flag(GPU1), "").expect("mark lost");
    node.inject(&format!("lost {GPU1}"));
    assert_eq!(next(&mut rx, 1).await, [key(GPU1, None, false)]);
    std::fs::remove_file(node.lost_flag(GPU1)).expect("unmark lost");
    assert_eq!(next(&mut rx, 1).await, [key(GPU1, None, true)]);
    monitor.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disabled_health_checks_start_nothing() {
    let node = Node::new();
    let (tx, mut rx) = mpsc::channel(16);
    let mut cfg = config(0);
    cfg.xids = XidFilter::from_values("all", "");
    let monitor =
        HealthMonitor::start(Arc::clone(&node.nvml), watched(), cfg, tx).expect("monitor starts");
    node.inject(&format!("xid {GPU1} 48"));
    let got = tokio::time::timeout(Duration::from_millis(300), rx.recv()).await;
    assert!(!matches!(got, Ok(Some(_))), "{got:?}");
    monitor.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gpu_that_cannot_be_registered_stays_unhealthy() {
    let node = Node::new();
    let (tx, mut rx) = mpsc::channel(16);
    let mut gpus = watched();
    let ghost = "GPU-00000000-0000-4000-8000-00000000dead";
    gpus.push(WatchedGpu {
        uuid: ghost.into(),
        migs: Vec::new(),
    });
    let monitor =
        HealthMonitor::start(Arc::clone(&node.nvml), gpus, config(0), tx).expect("monitor starts");
    assert_eq!(next(&mut rx, 1).await, [key(ghost, None, false)]);
    // Never comes back (xid_hold is 0: only the fault kind keeps it down).
    let got = tokio::time::timeout(Duration::from_millis(400), rx.recv()).await;
    assert!(got.is_err(), "{got:?}");
    monitor.stop();
}

/// GPU 0 with MIG devices `migs` (uuid, GI id), GPU 1 whole.
fn layout(migs: &[(&str, u32)]) -> Vec<WatchedGpu> {
    let mut v = watched();
    v[0].migs = migs
        .iter()
        .map(|(uuid, gi)| WatchedMig {
            uuid: (*uuid).into(),
            gi: *gi,
            ci: 0,
        })
        .collect();
    v
}

/// The next change, however loaded the machine.
async fn change(rx: &mut mpsc::Receiver<HealthChange>) -> (String, Option<String>, bool, String) {
    let c = tokio::time::timeout(Duration::from_secs(30), rx.recv())
        .await
        .expect("a health change")
        .expect("channel open");
    (c.gpu_uuid, c.mig_uuid, c.healthy, c.reason)
}

/// After a MIG re-partition (the watched set replaced): an Xid of a new MIG device marks it, a
/// removed MIG device's fault is cleared with one last change, a GPU's fault is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retargeted_monitor_watches_the_new_mig_devices() {
    let node = Node::new();
    let (tx, mut rx) = mpsc::channel(16);
    let monitor = HealthMonitor::start(
        Arc::clone(&node.nvml),
        layout(&[(MIG_A, 1)]),
        config(60_000),
        tx,
    )
    .expect("monitor starts");
    let down = |gpu: &str, mig: Option<&str>| {
        (
            gpu.to_string(),
            mig.map(String::from),
            false,
            "critical Xid 48".to_string(),
        )
    };
    node.inject(&format!("xid {MIG_A} 48"));
    assert_eq!(change(&mut rx).await, down(GPU0, Some(MIG_A)));
    // MIG_B is not watched yet: its Xid marks nothing (the events are read in order, so GPU 1's
    // change after it shows it was read).
    node.inject(&format!("xid {MIG_B} 48"));
    node.inject(&format!("xid {GPU1} 48"));
    assert_eq!(change(&mut rx).await, down(GPU1, None));

    let handle = monitor.retarget();
    tokio::task::spawn_blocking(move || handle.set(layout(&[(MIG_B, 11)])))
        .await
        .expect("set");
    // MIG_A left the node: its fault is cleared; GPU 1 keeps its fault (no change for it).
    let gone = (GPU0.to_string(), Some(MIG_A.to_string()), true);
    let got = change(&mut rx).await;
    assert_eq!((got.0, got.1, got.2), gone);
    assert_eq!(got.3, "no longer on the node");
    node.inject(&format!("xid {MIG_B} 48"));
    assert_eq!(change(&mut rx).await, down(GPU0, Some(MIG_B)));
    let got = tokio::time::timeout(Duration::from_millis(400), rx.recv()).await;
    assert!(got.is_err(), "GPU 1 kept its fault: {got:?}");
    monitor.stop();
}

/// A MIG device that appears on a GPU down with a critical Xid is down with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_mig_device_of_a_failed_gpu_is_unhealthy() {
    let node = Node::new();
    let (tx, mut rx) = mpsc::channel(16);
    let monitor = HealthMonitor::start(Arc::clone(&node.nvml), layout(&[]), config(60_000), tx)
        .expect("monitor starts");
    node.inject(&format!("xid {GPU0} 48"));
    let want = |mig: Option<&str>| {
        (
            GPU0.to_string(),
            mig.map(String::from),
            false,
            "critical Xid 48".to_string(),
        )
    };
    assert_eq!(change(&mut rx).await, want(None));
    let handle = monitor.retarget();
    tokio::task::spawn_blocking(move || handle.set(layout(&[(MIG_A, 1)])))
        .await
        .expect("set");
    assert_eq!(change(&mut rx).await, want(Some(MIG_A)));
    monitor.stop();
}
