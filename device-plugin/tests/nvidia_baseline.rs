//! NVIDIA's k8s-device-plugin v0.20.0 as the baseline on every simulated profile.
//!
//! Every expected value here was observed from NVIDIA's k8s-device-plugin v0.20.0 (tag v0.20.0,
//! commit 1b826acc6af3079d8923bac395c3124b8861a9a6, built from source) running on the same
//! simulated node (`gpuhook-sim build <profile>`, its mock `libnvidia-ml.so.1` found through
//! `--driver-root-ctr-path`, the node's `/proc/driver` and `/sys/bus/pci/devices` where the
//! plugin's container would see the host's) with the same config, driven by a fake kubelet that
//! dials like the kubelet's device manager. Written down as literals; none comes from our output.
//! Differences from NVIDIA are in docs/nvidia-differences.md ("Device plugin").
//! Needs root (the simulated node has real device nodes) and the mock NVML cdylib built.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test crate: a panic is a test failure

mod common;
#[path = "nvidia_baseline/support.rs"]
mod support;

use std::path::Path;

use gpuhook_device_plugin::api;
use support::*;

const NONE: &str = "version: v1\nflags:\n  migStrategy: none\n";
const SINGLE: &str = "version: v1\nflags:\n  migStrategy: single\n";
const MIXED: &str = "version: v1\nflags:\n  migStrategy: mixed\n";
/// Time-slicing: full GPUs 4 ways, 1g.10gb MIG devices 2 ways (mixed strategy).
const TIME_SLICED: &str = "version: v1\nflags:\n  migStrategy: mixed\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n    - name: nvidia.com/mig-1g.10gb\n      replicas: 2\n";

/// One advertised resource: name, replicas per device (1: not shared), the devices' own IDs.
type Res = (&'static str, usize, &'static [&'static str]);

fn expand(want: &[Res]) -> Vec<(String, Vec<String>)> {
    let mut v: Vec<(String, Vec<String>)> = want
        .iter()
        .map(|(name, replicas, ids)| {
            let mut all: Vec<String> = if *replicas == 1 {
                ids.iter().map(ToString::to_string).collect()
            } else {
                replica_ids(ids, *replicas)
            };
            all.sort();
            (name.to_string(), all)
        })
        .collect();
    v.sort();
    v
}

/// Checks the four configs on one profile against what NVIDIA advertised; `None`: NVIDIA's
/// plugin exited 1 with an error containing the given text.
fn check(profile: &str, cases: &[(&str, Result<&[Res], &str>)]) {
    let root = node(profile);
    for (yaml, want) in cases {
        let got = dry_run(root.path(), yaml);
        let what = format!("{profile} with {yaml:?}");
        match want {
            Ok(want) => {
                let got: Vec<(String, Vec<String>)> = got
                    .unwrap_or_else(|e| panic!("{what}: NVIDIA serves it, we refuse: {e}"))
                    .into_iter()
                    .map(|(n, ids, _)| (n, ids))
                    .collect();
                assert_eq!(got, expand(want), "{what}");
            }
            Err(text) => {
                let e = got.expect_err(&format!("{what}: NVIDIA exits 1, we accept"));
                assert!(e.contains(text), "{what}: {e} lacks NVIDIA's {text:?}");
            }
        }
    }
}

fn gpus(ids: &'static [&'static str], replicas: usize) -> [Res; 1] {
    [("nvidia.com/gpu", replicas, ids)]
}

#[test]
fn full_gpu_profiles_advertise_what_nvidia_does_under_every_mig_strategy() {
    for (profile, ids) in [
        ("dgx-h100", &DGX_H100[..]),
        ("t4", &T4[..]),
        ("l20", &L20[..]),
        ("l20-minimal", &L20_MINIMAL[..]),
        ("rhel-a100", &RHEL_A100[..]),
        ("workstation-full", &WORKSTATION[..]),
    ] {
        let one = gpus(ids, 1);
        let four = gpus(ids, 4);
        check(
            profile,
            &[
                (NONE, Ok(&one)),
                (SINGLE, Ok(&one)),
                (MIXED, Ok(&one)),
                (TIME_SLICED, Ok(&four)),
            ],
        );
    }
}

#[test]
fn a100_mig_mixed_advertises_what_nvidia_does() {
    let mixed: [Res; 3] = [
        ("nvidia.com/mig-1g.10gb", 1, &A100_1G10),
        ("nvidia.com/mig-2g.20gb", 1, &A100_2G20),
        ("nvidia.com/mig-3g.40gb", 1, &A100_3G40),
    ];
    let shared: [Res; 3] = [
        ("nvidia.com/mig-1g.10gb", 2, &A100_1G10),
        ("nvidia.com/mig-2g.20gb", 1, &A100_2G20),
        ("nvidia.com/mig-3g.40gb", 1, &A100_3G40),
    ];
    check(
        "a100-mig-mixed",
        &[
            (NONE, Ok(&gpus(&A100_GPUS, 1))),
            (SINGLE, Err("more than one MIG device type present on node")),
            (MIXED, Ok(&mixed)),
            (TIME_SLICED, Ok(&shared)),
        ],
    );
}

#[test]
fn single_layout_mig_profiles_advertise_what_nvidia_does() {
    check(
        "h100-mig",
        &[
            (NONE, Ok(&gpus(&H100_GPU, 1))),
            (SINGLE, Ok(&gpus(&H100_1G10, 1))),
            (MIXED, Ok(&[("nvidia.com/mig-1g.10gb", 1, &H100_1G10)])),
            (
                TIME_SLICED,
                Ok(&[("nvidia.com/mig-1g.10gb", 2, &H100_1G10)]),
            ),
        ],
    );
    check(
        "h20-mig",
        &[
            (NONE, Ok(&gpus(&H20_GPU, 1))),
            (SINGLE, Ok(&gpus(&H20_1G12, 1))),
            (MIXED, Ok(&[("nvidia.com/mig-1g.12gb", 1, &H20_1G12)])),
            (TIME_SLICED, Ok(&[("nvidia.com/mig-1g.12gb", 1, &H20_1G12)])),
        ],
    );
    // MIG on, no instance: NVIDIA serves the whole GPU under none, refuses single, and under
    // mixed logs "No devices found. Waiting indefinitely." (no resource, no exit).
    check(
        "h100-mig-empty",
        &[
            (NONE, Ok(&gpus(&H100_EMPTY_GPU, 1))),
            (SINGLE, Err("device 0 has no MIG devices configured")),
            (MIXED, Ok(&[])),
            (TIME_SLICED, Ok(&[])),
        ],
    );
}

#[test]
fn dgx_h100_devices_carry_the_numa_node_nvidia_reports() {
    // NVIDIA: `internal/rm/nvml_devices.go:nvmlDevice.GetNumaNode` reads
    // `/sys/bus/pci/devices/<bus>/numa_node`; `devices.go` puts it in every device's
    // TopologyInfo, replicas included. Sorted by device ID.
    const NUMA: [u64; 8] = [0, 0, 1, 1, 0, 1, 1, 0];
    let root = node("dgx-h100");
    let got = dry_run(root.path(), NONE).unwrap();
    assert_eq!(got.len(), 1);
    let want: Vec<Option<u64>> = NUMA.iter().map(|n| Some(*n)).collect();
    assert_eq!(got[0].2, want, "{:?}", got[0].1);
    let got = dry_run(root.path(), TIME_SLICED).unwrap();
    let want: Vec<Option<u64>> = NUMA
        .iter()
        .flat_map(|n| std::iter::repeat_n(Some(*n), 4))
        .collect();
    assert_eq!(got[0].2, want, "replicas carry their GPU's NUMA node");
}

/// Serves `yaml` on the node and returns the Allocate answer of `resource` for `id`.
async fn allocate(
    root: &Path,
    yaml: &str,
    resource: &str,
    id: &str,
) -> api::ContainerAllocateResponse {
    let mut s = Served::start(root, yaml, resource).await;
    let resp = s.allocate(id).await;
    s.stop().await;
    resp
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pass_device_specs_allocate_of_a_mig_device_matches_nvidia() {
    let root = node("a100-mig-mixed");
    let r = root.path().display().to_string();
    let yaml = "version: v1\nflags:\n  migStrategy: mixed\n  plugin:\n    passDeviceSpecs: true\n    deviceIDStrategy: index\n";
    let got = allocate(root.path(), yaml, "nvidia.com/mig-1g.10gb", A100_1G10[0]).await;
    assert_eq!(
        got.envs.get("NVIDIA_VISIBLE_DEVICES").map(String::as_str),
        Some("1:2")
    );
    assert_eq!(got.envs.len(), 1, "{:?}", got.envs);
    let specs: Vec<(String, String, String)> = got
        .devices
        .iter()
        .map(|d| {
            (
                d.container_path.clone(),
                d.host_path.clone(),
                d.permissions.clone(),
            )
        })
        .collect();
    // NVIDIA (`server.go:apiDeviceSpecs`), with the node's /dev as its container's /dev.
    let want: Vec<(String, String, String)> = [
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
        "/dev/nvidia-modeset",
        "/dev/nvidia1",
        "/dev/nvidia-caps/nvidia-cap219",
        "/dev/nvidia-caps/nvidia-cap220",
    ]
    .iter()
    .map(|p| (p.to_string(), format!("{r}{p}"), "rw".to_string()))
    .collect();
    assert_eq!(specs, want);
    assert!(got.mounts.is_empty() && got.annotations.is_empty() && got.cdi_devices.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_sliced_replica_allocate_names_its_gpu_like_nvidia() {
    let root = node("t4");
    let got = allocate(
        root.path(),
        TIME_SLICED,
        "nvidia.com/gpu",
        &format!("{}::0", T4[0]),
    )
    .await;
    let envs: Vec<(&str, &str)> = got
        .envs
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(envs, [("NVIDIA_VISIBLE_DEVICES", T4[0])]);
    assert!(got.devices.is_empty() && got.mounts.is_empty() && got.cdi_devices.is_empty());
}

/// The GPU (UUID without `::n`) of each ID.
fn gpus_of(ids: &[String]) -> Vec<&str> {
    let mut v: Vec<&str> = ids.iter().map(|i| i.split("::").next().unwrap()).collect();
    v.sort_unstable();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preferred_allocation_picks_the_gpus_nvidia_picks() {
    // Full GPUs: NVIDIA's `gpuallocator.NewBestEffortPolicy` (`internal/rm/allocate.go`) over
    // the dgx-h100 NVSwitch fabric chose exactly these (request: every GPU available).
    let root = node("dgx-h100");
    let all: Vec<String> = DGX_H100.iter().map(ToString::to_string).collect();
    let mut s = Served::start(root.path(), MIXED, "nvidia.com/gpu").await;
    assert_eq!(s.preferred(&all, 2).await, [DGX_H100[0], DGX_H100[1]]);
    let four = [DGX_H100[0], DGX_H100[1], DGX_H100[4], DGX_H100[7]];
    assert_eq!(s.preferred(&all, 4).await, four);
    s.stop().await;
    // Replicas: NVIDIA's `greedyAlloc` (distributed) took replicas of 4 different GPUs; which
    // replica number is unspecified (Go map order), so only the GPUs are compared.
    let got = preferred_replicas("dgx-h100", &DGX_H100, 4).await;
    let mut distinct = gpus_of(&got);
    distinct.dedup();
    assert_eq!(distinct.len(), 4, "{got:?}");
    // rhel-a100, 2 GPUs x 4 replicas, 4 wanted: NVIDIA took 2 replicas of each GPU.
    let got = preferred_replicas("rhel-a100", &RHEL_A100, 4).await;
    let want = [RHEL_A100[0], RHEL_A100[0], RHEL_A100[1], RHEL_A100[1]];
    assert_eq!(gpus_of(&got), want, "{got:?}");
}

/// `<gpu>::0..n` for every GPU.
fn replica_ids(gpus: &[&str], n: usize) -> Vec<String> {
    gpus.iter()
        .flat_map(|g| (0..n).map(move |i| format!("{g}::{i}")))
        .collect()
}

/// Our GetPreferredAllocation of `size` out of every replica of the profile's GPUs, time-sliced 4 ways.
async fn preferred_replicas(profile: &str, gpus: &[&str], size: i32) -> Vec<String> {
    let root = node(profile);
    let mut s = Served::start(root.path(), TIME_SLICED, "nvidia.com/gpu").await;
    let got = s.preferred(&replica_ids(gpus, 4), size).await;
    s.stop().await;
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn critical_xid_marks_the_gpu_nvidia_marks_and_an_ignored_one_nothing() {
    // NVIDIA (`internal/rm/health.go:checkHealth`): Xid 13 is ignored by default; Xid 79 on
    // GPU 0 made exactly that GPU Unhealthy in its next ListAndWatch update.
    let root = node("dgx-h100");
    let state = root
        .path()
        .join("usr/lib/x86_64-linux-gnu/gpuhook-sim-state");
    std::fs::create_dir_all(&state).unwrap();
    let events = state.join("events");
    let mut s = Served::start(root.path(), MIXED, "nvidia.com/gpu").await;
    let lines = format!("xid {} 13\nxid {} 79\n", DGX_H100[1], DGX_H100[0]);
    std::fs::write(&events, lines).unwrap();
    assert_eq!(s.next_unhealthy().await, [DGX_H100[0]]);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volume_mounts_allocate_of_a_mig_device_matches_nvidia() {
    // NVIDIA (`server.go:getAllocateResponse`): the env var points at the mount dir, one
    // `/dev/null` mount per device, nothing else.
    let root = node("a100-mig-mixed");
    let yaml = "version: v1\nflags:\n  migStrategy: mixed\n  plugin:\n    deviceListStrategy: volume-mounts\n";
    let got = allocate(root.path(), yaml, "nvidia.com/mig-1g.10gb", A100_1G10[0]).await;
    let envs: Vec<(&str, &str)> = got
        .envs
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        envs,
        [(
            "NVIDIA_VISIBLE_DEVICES",
            "/var/run/nvidia-container-devices"
        )]
    );
    let mounts: Vec<(&str, &str)> = got
        .mounts
        .iter()
        .map(|m| (m.container_path.as_str(), m.host_path.as_str()))
        .collect();
    let path = format!("/var/run/nvidia-container-devices/{}", A100_1G10[0]);
    assert_eq!(mounts, [(path.as_str(), "/dev/null")]);
    assert!(got.devices.is_empty() && got.annotations.is_empty() && got.cdi_devices.is_empty());
}
