//! Benchmark of the DRA plugin (issue #25 item 7), printed as figures:
//! - `NodePrepareResources` p50/p99 over the real dra.sock (gRPC, v1) for a 1-GPU claim, a MIG
//!   claim and an MPS claim (the claim's control daemon started and its limits read back, with
//!   the MPS control simulator), each followed by its `NodeUnprepareResources` (not timed);
//! - ResourceSlice publication for 8 GPUs × 7 MIG devices (56 devices) into an in-memory API
//!   server: first publication, an unchanged re-publication, one after a health change.
//!
//! `scripts/bench-dra.sh` builds and runs it (release). Argument: iterations (default 200).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpuhook_dra::api::{self, v1::DRAPluginClient};
use gpuhook_dra::cdi_claim::ClaimCdi;
use gpuhook_dra::config::{Allowed, Interval};
use gpuhook_dra::devices::catalogue;
use gpuhook_dra::driver::DriverOptions;
use gpuhook_dra::mps::MpsOptions;
use gpuhook_dra::publish::publish;
use gpuhook_dra::run::{start, RunOptions};
use gpuhook_dra::server::Sockets;
use gpuhook_dra::slices::UnhealthyPolicy;
use gpuhook_dra::testkit::{claim, inventory, opaque, MemCluster};
use gpuhook_dra::timeslice::TimeSlicer;
use gpuhook_node::{Inventory, MigDevice};
use hyper_util::rt::TokioIo;
use serde_json::json;
use tonic::transport::Endpoint;

#[derive(Debug)]
struct NoSlicer;
impl TimeSlicer for NoSlicer {
    fn set(&self, _: &str, _: Interval) -> Result<(), String> {
        Ok(())
    }
}

/// The `per_mille`th value of `sorted` (nearest rank).
fn pct(sorted: &[Duration], per_mille: usize) -> Duration {
    let i = (sorted.len().saturating_sub(1) * per_mille + 500) / 1000;
    sorted[i.min(sorted.len() - 1)]
}

fn report(what: &str, mut d: Vec<Duration>) {
    d.sort();
    println!(
        "{what:<34} n={:<4} p50={:>9.3} ms  p99={:>9.3} ms",
        d.len(),
        pct(&d, 500).as_secs_f64() * 1e3,
        pct(&d, 990).as_secs_f64() * 1e3
    );
}

fn options(dir: &Path, sim: &Path) -> DriverOptions {
    DriverOptions {
        driver: "gpu.nvidia.com".into(),
        node: "node-a".into(),
        checkpoint: dir.join("p/checkpoint.json"),
        cdi: ClaimCdi {
            dir: dir.join("cdi"),
            edit_options: gpuhook_cdi::EditOptions::new("/usr/bin/gpuhook"),
            capabilities: [
                gpuhook_node::Capability::Compute,
                gpuhook_node::Capability::Utility,
            ]
            .into(),
        },
        mps: MpsOptions {
            start_timeout: Duration::from_secs(10),
            command_timeout: Duration::from_secs(5),
            ..gpuhook_dra::testkit::mps_options(dir.join("p/mps"), sim.to_path_buf())
        },
        allowed: Allowed::default(),
    }
}

async fn prepare_bench(n: usize, sim: &Path) {
    let dir = tempfile::tempdir().unwrap();
    let cluster = Arc::new(MemCluster::default());
    let run = RunOptions {
        sockets: Sockets {
            registry_dir: dir.path().join("reg"),
            plugin_dir: dir.path().join("p"),
        },
        sys_root: dir.path().into(),
        publish: false,
        unhealthy: UnhealthyPolicy::Taint,
        republish: Duration::from_secs(3600),
        health_service: false,
        nvml: None,
        partitionable: None,
    };
    let running = start(
        options(dir.path(), sim),
        run,
        inventory(),
        cluster.clone(),
        Arc::new(NoSlicer),
    )
    .unwrap();
    let sock = dir.path().join("p/dra.sock");
    let channel = Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_| {
            let p = sock.clone();
            async move { tokio::net::UnixStream::connect(p).await.map(TokioIo::new) }
        }))
        .await
        .unwrap();
    let client = DRAPluginClient::new(channel);
    run_claims(client, &cluster, n).await;
    running.stop().await;
}

/// Prepares (timed) and unprepares each kind of claim.
async fn run_claims(
    mut client: DRAPluginClient<tonic::transport::Channel>,
    cluster: &MemCluster,
    n: usize,
) {
    let mps = opaque(
        &[],
        json!({"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
        "sharing": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 25, "defaultPinnedDeviceMemoryLimit": "10Gi"}}}),
    );
    let kinds: [(&str, &str, Vec<serde_json::Value>); 3] = [
        ("1-GPU claim", "gpu-0", vec![]),
        ("MIG claim", "gpu-1-mig-1g10gb-9-0", vec![]),
        ("MPS claim (daemon start included)", "gpu-0", vec![mps]),
    ];
    for (what, device, configs) in kinds {
        let mut times = Vec::new();
        let iters = if configs.is_empty() { n } else { n.min(100) };
        for i in 0..iters {
            let uid = format!("uid-{i}");
            cluster.add_claim(claim(
                "ns",
                &format!("c{i}"),
                &uid,
                "node-a",
                &[("r", device)],
                configs.clone(),
            ));
            let c = api::Claim {
                namespace: "ns".into(),
                name: format!("c{i}"),
                uid: uid.clone(),
            };
            let t = Instant::now();
            let r = client
                .node_prepare_resources(api::NodePrepareResourcesRequest {
                    claims: vec![c.clone()],
                })
                .await
                .unwrap()
                .into_inner();
            times.push(t.elapsed());
            assert_eq!(r.claims[&uid].error, "", "{what}");
            let u = client
                .node_unprepare_resources(api::NodeUnprepareResourcesRequest { claims: vec![c] })
                .await
                .unwrap()
                .into_inner();
            assert_eq!(u.claims[&uid].error, "");
        }
        report(&format!("NodePrepareResources {what}"), times);
    }
}

/// 8 H100s in MIG mode with seven 1g.10gb devices each.
fn big_inventory() -> Inventory {
    let mut inv = inventory();
    let template = inv.gpus[1].clone();
    inv.gpus = (0..8u32)
        .map(|i| {
            let mut g = template.clone();
            g.index = i;
            g.minor = i;
            g.uuid = format!("GPU-{i:08x}-0000-0000-0000-000000000000");
            g.mig_devices = (0..7u32)
                .map(|m| MigDevice {
                    index: m,
                    parent_index: i,
                    gi_id: 7 + m,
                    ci_id: 0,
                    uuid: format!("MIG-{i:04x}{m:04x}-0000-0000-0000-000000000000"),
                    memory_mib: 9856,
                    profile: Some("1g.10gb".into()),
                    gi_cap_minor: 100 + 9 * m,
                    ci_cap_minor: 101 + 9 * m,
                })
                .collect();
            g
        })
        .collect();
    inv
}

fn publish_bench(n: usize) {
    let devices = catalogue(&big_inventory(), Path::new("/nonexistent"));
    assert_eq!(devices.len(), 56);
    let (mut first, mut same, mut changed) = (Vec::new(), Vec::new(), Vec::new());
    let healthy = BTreeMap::new();
    let mut sick = BTreeMap::new();
    sick.insert(devices[3].uuid.clone(), "critical Xid 48".to_string());
    for _ in 0..n {
        let c = MemCluster::default();
        let t = Instant::now();
        publish(
            &c,
            "gpu.nvidia.com",
            "node-a",
            &devices,
            &healthy,
            UnhealthyPolicy::Taint,
            false,
        )
        .unwrap();
        first.push(t.elapsed());
        let t = Instant::now();
        let r = publish(
            &c,
            "gpu.nvidia.com",
            "node-a",
            &devices,
            &healthy,
            UnhealthyPolicy::Taint,
            false,
        )
        .unwrap();
        same.push(t.elapsed());
        assert_eq!((r.created, r.replaced), (0, 0));
        let t = Instant::now();
        publish(
            &c,
            "gpu.nvidia.com",
            "node-a",
            &devices,
            &sick,
            UnhealthyPolicy::Taint,
            false,
        )
        .unwrap();
        changed.push(t.elapsed());
    }
    report("slices 8x7 MIG: first publication", first);
    report("slices 8x7 MIG: unchanged", same);
    report("slices 8x7 MIG: after a health change", changed);
}

fn sim_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("GPUHOOK_SIM_MPS_CONTROL") {
        return p.into();
    }
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(Path::parent).unwrap();
    dir.join("sim-nvidia-cuda-mps-control")
}

#[tokio::main]
async fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(200);
    let sim = sim_binary();
    assert!(
        sim.exists(),
        "{} missing: cargo build --release -p gpuhook-sim-mps-control",
        sim.display()
    );
    prepare_bench(n, &sim).await;
    publish_bench(n);
}
