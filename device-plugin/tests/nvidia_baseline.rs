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

use std::path::Path;
use std::process::Command;

use common::node::BIN;
use common::{next_list, FakeKubelet, WAIT};
use gpuhook_device_plugin::api;
use gpuhook_sim::profile::NodeProfile;
use gpuhook_sim::{materialise, MaterialiseOptions};

const NONE: &str = "version: v1\nflags:\n  migStrategy: none\n";
const SINGLE: &str = "version: v1\nflags:\n  migStrategy: single\n";
const MIXED: &str = "version: v1\nflags:\n  migStrategy: mixed\n";
/// Time-slicing: full GPUs 4 ways, 1g.10gb MIG devices 2 ways (mixed strategy).
const TIME_SLICED: &str = "version: v1\nflags:\n  migStrategy: mixed\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n    - name: nvidia.com/mig-1g.10gb\n      replicas: 2\n";

const DGX_H100: [&str; 8] = [
    "GPU-054b5817-d8d5-cb0c-e645-7b685ed85ca6",
    "GPU-192dd611-6d8a-5ecf-3ede-0587705f2e20",
    "GPU-6488b716-7c98-6278-11af-3429eea75d97",
    "GPU-6dbbc031-b4bc-424b-1e9a-c08644f26e69",
    "GPU-b5b0b898-dc85-046e-9974-a9c372303cce",
    "GPU-d3047d8b-cc4c-8769-7149-ff1dccaf40f6",
    "GPU-e5e68423-6751-255f-c16e-ea0d3fae783c",
    "GPU-f5697335-68e9-f228-da8c-f7af42e3b440",
];
const A100_GPUS: [&str; 2] = [
    "GPU-c4f82fda-f11d-4492-a176-950eab898aad",
    "GPU-cedc8ef5-2012-4e98-be22-5cdcb615ef10",
];
const A100_1G10: [&str; 7] = [
    "MIG-1ff7dfac-6e3c-6a16-e1e3-9334e0e7bdbf",
    "MIG-225e2f35-94b0-3136-7b2d-75c5025b713a",
    "MIG-3921a5a0-0380-55eb-a9d4-2c0dc7febab5",
    "MIG-94aa7f60-2fb0-6a64-0fc0-d50c83f9ef3e",
    "MIG-ac75110b-0eb4-37dc-3154-25ab2bcf98a0",
    "MIG-e8625a38-ed19-839b-8af6-577ec4cdeea1",
    "MIG-f63e5e6f-7454-9b92-e0bc-fdab8858231a",
];
const A100_2G20: [&str; 2] = [
    "MIG-9b612579-eea6-d02e-9378-b6e128e4a517",
    "MIG-e2cb7d61-d7f3-f752-602c-5d1e97c7969c",
];
const A100_3G40: [&str; 1] = ["MIG-ae18ffb7-f9f1-fb51-5ea5-0879a2b7053a"];
const H100_GPU: [&str; 1] = ["GPU-fd8da993-f3cd-7ebd-8145-12144134a43b"];
const H100_1G10: [&str; 7] = [
    "MIG-12db4061-8473-070e-3522-3c866d13cc5c",
    "MIG-1e48b296-dcf5-23bf-5fc5-7a0b3d6741a2",
    "MIG-d03f1bcc-ee79-56c1-29fa-cdd4118fa612",
    "MIG-e3084145-31ff-9be5-fa09-8fb4de892bd8",
    "MIG-ebb2129d-c749-9a6a-c7ff-fc35ebe58496",
    "MIG-eff95050-5d80-1f6e-f8be-85636fe95b58",
    "MIG-fc6bc1b6-6dec-0afa-a860-867d7b266067",
];
const H100_EMPTY_GPU: [&str; 1] = ["GPU-7a9156e6-b19d-40db-b4b7-33105084c3f4"];
const H20_GPU: [&str; 1] = ["GPU-47f7199f-a1f1-9d77-df3a-02910bb51b8c"];
const H20_1G12: [&str; 7] = [
    "MIG-0b28cd05-b74f-501f-1b96-76738f66b6b3",
    "MIG-18e550d9-91bb-e6fc-8e82-57111d1471e2",
    "MIG-2f17dfb6-0137-a184-1857-4e88851e2bbc",
    "MIG-6191b129-f493-7d24-9bce-6e884a808b9d",
    "MIG-6c3e4650-ce19-7cc2-c7bc-deda5a030656",
    "MIG-c115f6ab-dd76-5fbf-bb6a-ad0ed8824b66",
    "MIG-e74131f4-c05d-f360-1cd7-5b4b00b570ba",
];
const T4: [&str; 1] = ["GPU-ac3229e7-417e-7ede-24ee-fab293a06d71"];
const L20: [&str; 1] = ["GPU-e6c1ce30-955f-10af-95b1-0a37b420ba76"];
const L20_MINIMAL: [&str; 1] = ["GPU-30aa8cd6-e129-4956-8f3d-1db1c2b41ae7"];
const RHEL_A100: [&str; 2] = [
    "GPU-22adc0b9-fa37-4d63-9f06-46d90f218054",
    "GPU-5f81fd9f-4d89-42c4-9485-601d787d3fa2",
];
const WORKSTATION: [&str; 1] = ["GPU-f8730119-4d74-4bcc-805e-8c9aef8ad514"];

/// One advertised resource: name, replicas per device (1: not shared), the devices' own IDs.
type Res = (&'static str, usize, &'static [&'static str]);

/// The profile materialised as a driver root in a fresh temp dir.
fn node(profile: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let p = NodeProfile::builtin(profile).unwrap();
    materialise(&p, dir.path(), &MaterialiseOptions::default()).unwrap_or_else(|e| {
        panic!("materialise {profile} (needs root and `cargo build -p gpuhook-mock-nvml`): {e}")
    });
    dir
}

/// `dry-run` on the node: Ok(resources as (name, sorted ids, numa nodes)) or Err(errors).
#[allow(clippy::type_complexity)]
fn dry_run(
    root: &Path,
    yaml: &str,
) -> Result<Vec<(String, Vec<String>, Vec<Option<u64>>)>, String> {
    let cfg = root.join("baseline-config.yaml");
    std::fs::write(&cfg, yaml).unwrap();
    let out = Command::new(BIN)
        .args(["dry-run", "--config"])
        .arg(&cfg)
        .arg("--driver-root")
        .arg(root)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    if v["outcome"] != "ok" {
        assert!(!out.status.success(), "errors but exit 0: {v}");
        return Err(v["errors"].to_string());
    }
    let mut res: Vec<_> = v["advertisement"]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let mut devs: Vec<(String, Option<u64>)> = r["devices"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| {
                    (
                        d["id"].as_str().unwrap().to_string(),
                        d["numa_node"].as_u64(),
                    )
                })
                .collect();
            devs.sort();
            let (ids, numa) = devs.into_iter().unzip();
            (r["name"].as_str().unwrap().to_string(), ids, numa)
        })
        .filter(|(_, ids, _): &(String, Vec<String>, _)| !ids.is_empty())
        .collect();
    res.sort();
    Ok(res)
}

fn expand(want: &[Res]) -> Vec<(String, Vec<String>)> {
    let mut v: Vec<(String, Vec<String>)> = want
        .iter()
        .map(|(name, replicas, ids)| {
            let mut all: Vec<String> = if *replicas == 1 {
                ids.iter().map(ToString::to_string).collect()
            } else {
                ids.iter()
                    .flat_map(|id| (0..*replicas).map(move |n| format!("{id}::{n}")))
                    .collect()
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
    let cfg = root.join("baseline-config.yaml");
    std::fs::write(&cfg, yaml).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut kubelet = FakeKubelet::start(dir.path());
    let plugin = common::node::Plugin(
        Command::new(BIN)
            .arg("serve")
            .arg("--config")
            .arg(&cfg)
            .arg("--driver-root")
            .arg(root)
            .arg("--plugin-dir")
            .arg(dir.path())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut reg = loop {
        let reg = kubelet.next_registration().await;
        if reg.request.resource_name == resource {
            break reg;
        }
    };
    next_list(&mut reg, WAIT).await;
    let req = api::AllocateRequest {
        container_requests: vec![api::ContainerAllocateRequest {
            devices_ids: vec![id.to_string()],
        }],
    };
    let resp = reg.client.allocate(req).await.unwrap().into_inner();
    common::node::terminate(plugin).await;
    kubelet.stop().await;
    resp.container_responses.into_iter().next().unwrap()
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
