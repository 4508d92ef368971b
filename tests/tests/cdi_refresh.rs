//! `gpuhook cdi refresh --watch`: the spec follows a MIG re-partition of a simulated node, an
//! unchanged node never rewrites it, and the systemd unit that runs it is valid.
//!
//! Every wait is for a condition, with a deadline (`LIMIT`) far above what an idle machine needs
//! (about a second): a loaded 2-core CI machine may take seconds for an fsync.
//!
//! The re-partition is a rebuild of the driver root with a profile whose GPU has fewer MIG
//! devices: `gpuhook-sim` removes the capability files of the destroyed GPU instances, as the
//! driver does when `nvidia-smi mig -dci/-dgi` destroys them, and the mock NVML serves the new
//! layout. Expectations come from the profiles, not from gpuhook's output.

// Integration tests: a failed unwrap or expect is the test failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cdi_support;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use cdi_support::{build_node, device_names, gpuhook_cmd, s, tmp};
use gpuhook_sim::{materialise, MaterialiseOptions, NodeProfile};

/// How long any condition may take: generous, the watcher polls every second.
const LIMIT: Duration = Duration::from_secs(60);

/// The watcher, killed when the test ends (pass or panic).
struct Watcher(Child);

impl Drop for Watcher {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_watcher(root: &Path, spec: &Path, cache: &Path, log: &Path) -> Watcher {
    let log_file = std::fs::File::create(log).expect("log file");
    let child = gpuhook_cmd(&[
        "cdi",
        "refresh",
        "--watch",
        "--interval",
        "1",
        "--driver-root",
        s(root),
        "--output",
        s(spec),
        "--inventory-cache",
        s(cache),
    ])
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(log_file)
    .spawn()
    .expect("spawn gpuhook cdi refresh");
    Watcher(child)
}

/// The device names a spec for `profile` must have (index names and UUIDs, plus `all`).
fn expected_names(profile: &NodeProfile) -> Vec<String> {
    let mut names = vec!["all".to_string()];
    for g in &profile.gpus {
        if g.mig_devices.is_empty() {
            names.push(g.index.to_string());
            names.push(g.uuid.clone());
        }
        for (i, m) in g.mig_devices.iter().enumerate() {
            names.push(format!("{}:{i}", g.index));
            names.push(m.uuid.clone());
        }
    }
    names.sort();
    names
}

fn spec_names(spec: &Path) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(spec).ok()?;
    let doc: serde_json::Value = serde_json::from_str(&text).ok()?;
    let mut names = device_names(&doc);
    names.sort();
    Some(names)
}

/// Waits up to `limit` for the spec's device names to become `want`; returns how long it took.
fn wait_for_names(spec: &Path, want: &[String], limit: Duration, log: &Path) -> Duration {
    let start = Instant::now();
    loop {
        if spec_names(spec).as_deref() == Some(want) {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < limit,
            "the spec did not follow within {limit:?}: has {:?}, want {want:?}\nwatcher log:\n{}",
            spec_names(spec),
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// How many generations the watcher has finished (its "wrote"/"unchanged" lines).
fn generations(log: &Path) -> usize {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .filter(|l| l.starts_with("wrote ") || l.starts_with("unchanged "))
        .count()
}

/// (inode, mtime in ns) of a file.
fn identity(path: &Path) -> (u64, i64, i64) {
    let m = std::fs::metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (m.ino(), m.mtime(), m.mtime_nsec())
}

/// Rebuilds `root` as h100-mig with only its first `keep` MIG devices; returns that profile.
fn repartition(root: &Path, keep: usize) -> NodeProfile {
    let p = repartitioned(keep);
    let opts = MaterialiseOptions {
        mock_nvml: Some(gpuhook_e2e::mock_nvml_lib()),
        bin_dir: Some(gpuhook_e2e::bin_dir()),
        ldconfig: None,
    };
    materialise(&p, root, &opts).expect("re-partition the simulated node");
    p
}

/// h100-mig with only its first `keep` MIG devices (the others destroyed).
fn repartitioned(keep: usize) -> NodeProfile {
    let mut p = NodeProfile::builtin("h100-mig").expect("h100-mig");
    assert!(
        p.gpus[0].mig_devices.len() > keep,
        "h100-mig has more MIG devices"
    );
    // Destroying instances leaves MIG mode on.
    assert!(p.gpus[0].mig_mode, "h100-mig has MIG mode on");
    p.gpus[0].mig_devices.truncate(keep);
    p.name = format!("h100-mig-{keep}");
    p
}

/// A simulated h100-mig node under a running watcher, its first spec written (the boot case).
struct WatchedNode {
    _dir: tempfile::TempDir,
    root: PathBuf,
    spec: PathBuf,
    cache: PathBuf,
    log: PathBuf,
    before: NodeProfile,
    _watcher: Watcher,
}

impl WatchedNode {
    fn start(name: &str) -> WatchedNode {
        let dir = tmp(name);
        let path = |p: &str| dir.path().join(p);
        let (root, spec, cache, log) = (
            path("node"),
            path("spec.json"),
            path("inventory.json"),
            path("watch.log"),
        );
        let before = build_node("h100-mig", &root);
        let watcher = start_watcher(&root, &spec, &cache, &log);
        wait_for_names(&spec, &expected_names(&before), LIMIT, &log);
        // The spec is written first, then the inventory cache (with its fsync), then the line
        // that says so: the first generation is over only when that line is there. A test that
        // went on at the spec alone saw no cache yet, or counted the line before it came.
        let start = Instant::now();
        while generations(&log) == 0 {
            assert!(
                start.elapsed() < LIMIT,
                "the first generation never ended\nwatcher log:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        WatchedNode {
            _dir: dir,
            root,
            spec,
            cache,
            log,
            before,
            _watcher: watcher,
        }
    }
}

#[test]
fn the_spec_follows_a_mig_repartition_and_an_idle_node_is_not_rewritten() {
    if !gpuhook_e2e::e2e_ready("cdi_refresh", &["ldconfig"]) {
        return;
    }
    // Boot: the first generation.
    let node = WatchedNode::start("refresh");
    let (root, spec, cache, log) = (&*node.root, &*node.spec, &*node.cache, &*node.log);
    let before = &node.before;
    let spec_id = identity(spec);
    let cache_id = identity(cache);
    let generations = || generations(log);
    let generated = generations();
    assert_eq!(generated, 1, "one generation at boot");

    // An unchanged node: several polls, no rewrite of the spec or the cache.
    std::thread::sleep(Duration::from_millis(3500));
    assert_eq!(
        identity(spec),
        spec_id,
        "an unchanged node rewrote the spec"
    );
    assert_eq!(
        identity(cache),
        cache_id,
        "an unchanged node rewrote the cache"
    );
    assert_eq!(
        generations(),
        generated,
        "an unchanged node must not even be rediscovered"
    );

    // Re-partition: 7 x 1g.10gb -> 3 x 1g.10gb.
    let after = repartition(root, 3);
    let took = wait_for_names(spec, &expected_names(&after), LIMIT, log);
    eprintln!("spec followed the re-partition in {took:?}");

    // The inventory cache followed too: the kept MIG devices, not the destroyed ones. It is
    // written after the spec (its own atomic write and fsync), so it may trail by a moment.
    let follows = |inv: &str| {
        after.gpus[0]
            .mig_devices
            .iter()
            .all(|m| inv.contains(&m.uuid))
            && before.gpus[0].mig_devices[3..]
                .iter()
                .all(|m| !inv.contains(&m.uuid))
    };
    let deadline = std::time::Instant::now() + LIMIT;
    let mut inv = std::fs::read_to_string(cache).expect("inventory cache");
    while !follows(&inv) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        inv = std::fs::read_to_string(cache).expect("inventory cache");
    }
    for m in &after.gpus[0].mig_devices {
        assert!(inv.contains(&m.uuid), "cache lacks {}", m.uuid);
    }
    for m in &before.gpus[0].mig_devices[3..] {
        assert!(
            !inv.contains(&m.uuid),
            "cache still has destroyed {}",
            m.uuid
        );
    }
    let log_text = std::fs::read_to_string(log).unwrap_or_default();
    assert!(
        log_text.contains("node state changed"),
        "the watcher says why it regenerated:\n{log_text}"
    );
}

/// Destroying the last MIG instance (h100-mig re-partitioned to zero, MIG mode still on: the
/// h100-mig-empty state) leaves no device to describe. nvidia-ctk v1.20 fails there and keeps its
/// old spec, so runtimes keep offering destroyed devices; the watcher removes gpuhook's spec
/// instead, the inventory cache follows, and the log says why and how to get devices back.
#[test]
fn the_last_mig_instance_destroyed_removes_the_stale_spec() {
    if !gpuhook_e2e::e2e_ready("cdi_refresh", &["ldconfig"]) {
        return;
    }
    let node = WatchedNode::start("refresh-empty");
    let (root, spec, cache, log) = (&*node.root, &*node.spec, &*node.cache, &*node.log);
    let before = &node.before;

    let after = repartition(root, 0);
    assert!(after.gpus[0].mig_mode && after.gpus[0].mig_devices.is_empty());
    let start = Instant::now();
    while spec.exists() {
        assert!(
            start.elapsed() < LIMIT,
            "the stale spec (destroyed MIG devices {:?}) stayed\nwatcher log:\n{}",
            spec_names(spec),
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The cache follows: the GPU is still there, none of the destroyed MIG devices is.
    let start = Instant::now();
    loop {
        let inv = std::fs::read_to_string(cache).unwrap_or_default();
        let stale = before.gpus[0]
            .mig_devices
            .iter()
            .any(|m| inv.contains(&m.uuid));
        if !stale && inv.contains(&before.gpus[0].uuid) {
            break;
        }
        assert!(
            start.elapsed() < LIMIT,
            "the inventory cache still lists destroyed MIG devices:\n{inv}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let log_text = std::fs::read_to_string(log).unwrap_or_default();
    assert!(
        log_text.contains("MIG mode is on without MIG devices")
            && log_text.contains("create MIG instances")
            && log_text.contains(&format!("removed {}", spec.display())),
        "the warning says why the spec is gone and what to do:\n{log_text}"
    );
}

fn unit_path() -> PathBuf {
    gpuhook_e2e::workspace_root().join("deploy/systemd/gpuhook-cdi-refresh.service")
}

#[test]
fn the_refresh_unit_runs_the_watcher() {
    let text = std::fs::read_to_string(unit_path()).expect("unit file");
    let exec: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("ExecStart="))
        .collect();
    assert_eq!(exec.len(), 1, "one ExecStart");
    let argv: Vec<&str> = exec[0].split_whitespace().collect();
    assert_eq!(
        &argv[..4],
        ["/usr/local/bin/gpuhook", "cdi", "refresh", "--watch"]
    );
    // Every flag it passes is one the built binary knows.
    let out = gpuhook_cmd(&["cdi", "refresh", "--help"])
        .output()
        .expect("gpuhook --help");
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && help.contains("Examples:"), "{help}");
    for flag in argv.iter().filter(|a| a.starts_with("--")) {
        assert!(
            help.contains(flag),
            "ExecStart passes {flag}, unknown to `cdi refresh`:\n{help}"
        );
    }
    // A long-running watcher is Type=simple (it does not fork or notify).
    assert!(text.lines().any(|l| l == "Type=simple"), "{text}");
}

#[test]
fn the_refresh_unit_passes_systemd_analyze_verify() {
    if !gpuhook_e2e::e2e_ready("cdi_refresh", &["systemd-analyze"]) {
        return;
    }
    // `verify` wants ExecStart= to exist: point it at the gpuhook we built.
    let text = std::fs::read_to_string(unit_path())
        .expect("unit file")
        .replace("/usr/local/bin/gpuhook", s(&gpuhook_e2e::built("gpuhook")));
    let dir = tmp("refresh-unit");
    let unit = dir.path().join("gpuhook-cdi-refresh.service");
    std::fs::write(&unit, text).expect("write unit");
    let out = std::process::Command::new("systemd-analyze")
        .arg("verify")
        .arg(&unit)
        .output()
        .expect("run systemd-analyze");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "systemd-analyze verify failed:\n{stderr}"
    );
    let ours: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("gpuhook-cdi-refresh"))
        .collect();
    assert!(
        ours.is_empty(),
        "systemd-analyze verify complains:\n{stderr}"
    );
}
