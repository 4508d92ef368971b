//! Benchmark of partitionable MIG (KEP-4815) against static MIG, measured in the same run on one
//! simulated 8-GPU H100 node in MIG mode (`gpuhook-sim` profile `dgx-h100` with MIG on, mock
//! NVML), printed as p50/p99 and ratios:
//! - ResourceSlices: the catalogue of the node and its first publication into an in-memory API
//!   server: static = 8 GPUs × 7 existing 1g.10gb devices (56 devices); partitionable = 8 counter
//!   sets and every placement of every profile (8 × (1 + 25) devices);
//! - a MIG claim: static = prepare (CDI spec) and unprepare of an existing device;
//!   partitionable = prepare that creates the GPU and compute instance (checkpointed before and
//!   after, node re-read for its nodes) and unprepare that destroys it.
//!
//! `cargo bench -p gpuhook-dra --bench partition` (root; `cargo build -p gpuhook-sim --bins` and
//! `cargo build -p gpuhook-mock-nvml` of the same profile first, else it says so and exits).
//! Argument: iterations (default 50).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpuhook_dra::cdi_claim::ClaimCdi;
use gpuhook_dra::checkpoint::Checkpoint;
use gpuhook_dra::config::{Allowed, Interval};
use gpuhook_dra::devices::NodeDevice;
use gpuhook_dra::driver::{ClaimRef, Driver, DriverOptions};
use gpuhook_dra::mps::MpsOptions;
use gpuhook_dra::publish::publish;
use gpuhook_dra::slices::UnhealthyPolicy;
use gpuhook_dra::testkit::{claim, MemCluster};
use gpuhook_dra::timeslice::TimeSlicer;
use gpuhook_mig::{create_instance, destroy_instance, NoHolders};
use gpuhook_node::{DiscoverOptions, Inventory};

#[derive(Debug)]
struct NoSlicer;
impl TimeSlicer for NoSlicer {
    fn set(&self, _: &str, _: Interval) -> Result<(), String> {
        Ok(())
    }
}

fn pct(sorted: &[Duration], per_mille: usize) -> Duration {
    let i = (sorted.len().saturating_sub(1) * per_mille + 500) / 1000;
    sorted[i.min(sorted.len() - 1)]
}

/// Prints a line and returns the p50 in ms.
fn report(what: &str, mut d: Vec<Duration>) -> f64 {
    d.sort();
    let (p50, p99) = (pct(&d, 500), pct(&d, 990));
    println!(
        "{what:<46} n={:<4} p50={:>9.3} ms  p99={:>9.3} ms",
        d.len(),
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3
    );
    p50.as_secs_f64() * 1e3
}

/// The simulator and mock NVML next to this bench's target dir, or why not.
fn tools() -> Result<(PathBuf, PathBuf), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let dir = exe.parent().and_then(Path::parent).ok_or("no target dir")?;
    let (sim, mock) = (dir.join("gpuhook-sim"), dir.join("libgpuhook_mock_nvml.so"));
    let uid = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    if !uid.lines().any(|l| l.starts_with("Uid:\t0")) {
        return Err("needs root (the simulated node has device nodes)".into());
    }
    if !sim.is_file() || !mock.is_file() {
        return Err(format!(
            "{} or {} is missing: cargo build --profile <this profile> -p gpuhook-sim --bins, then -p gpuhook-mock-nvml",
            sim.display(),
            mock.display()
        ));
    }
    Ok((sim, mock))
}

/// Materialises 8 H100s in MIG mode with no MIG device under `dir/node`.
fn node(dir: &Path, sim: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../sim/profiles/dgx-h100.toml");
    let text = std::fs::read_to_string(src).unwrap();
    let text = text
        .replace("mig_mode = false", "mig_mode = true")
        .replace("name = \"dgx-h100\"", "name = \"dgx-h100-mig-empty\"");
    let profile = dir.join("dgx-h100-mig-empty.toml");
    std::fs::write(&profile, text).unwrap();
    let root = dir.join("node");
    let out = std::process::Command::new(sim)
        .arg("build")
        .arg(&profile)
        .arg(&root)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    root
}

fn options(dir: &Path, name: &str) -> DriverOptions {
    DriverOptions {
        driver: "gpu.nvidia.com".into(),
        node: "node-a".into(),
        checkpoint: dir.join(format!("{name}/checkpoint.json")),
        cdi: ClaimCdi {
            dir: dir.join(format!("{name}/cdi")),
            edit_options: gpuhook_cdi::EditOptions::new("/usr/bin/gpuhook"),
            capabilities: [gpuhook_node::Capability::Compute].into(),
        },
        mps: MpsOptions {
            start_timeout: Duration::from_secs(5),
            command_timeout: Duration::from_secs(5),
            ..gpuhook_dra::testkit::mps_options(
                dir.join(format!("{name}/mps")),
                "/bin/false".into(),
            )
        },
        allowed: Allowed::default(),
    }
}

/// `n` catalogues (`make`) and first publications of the node's devices.
fn publish_bench(n: usize, what: &str, make: &dyn Fn() -> Vec<NodeDevice>) -> f64 {
    let mut d = Vec::new();
    let mut count = 0;
    for _ in 0..n {
        let cluster = MemCluster::default();
        let t = Instant::now();
        let devices = make();
        publish(
            &cluster,
            "gpu.nvidia.com",
            "node-a",
            &devices,
            &BTreeMap::new(),
            UnhealthyPolicy::Taint,
            false,
        )
        .unwrap();
        d.push(t.elapsed());
        count = devices.len();
    }
    report(&format!("{what} ({count} devices)"), d)
}

/// `n` prepares and unprepares of a claim for `device`; (prepare p50, unprepare p50).
async fn claim_bench(
    n: usize,
    what: &str,
    driver: &Driver,
    cluster: &MemCluster,
    device: &str,
) -> (f64, f64) {
    let (mut prep, mut unprep) = (Vec::new(), Vec::new());
    for i in 0..n {
        let uid = format!("{}-{i}", what.split(' ').next().unwrap_or("c"));
        cluster.add_claim(claim(
            "ns",
            &uid,
            &uid,
            "node-a",
            &[("mig", device)],
            vec![],
        ));
        let c = ClaimRef {
            namespace: "ns".into(),
            name: uid.clone(),
            uid: uid.clone(),
        };
        let t = Instant::now();
        driver.prepare(&c).await.unwrap();
        prep.push(t.elapsed());
        let t = Instant::now();
        driver.unprepare(&uid).await.unwrap();
        unprep.push(t.elapsed());
    }
    let a = report(&format!("{what}: NodePrepareResources"), prep);
    let b = report(&format!("{what}: NodeUnprepareResources"), unprep);
    (a, b)
}

fn driver(
    dir: &Path,
    name: &str,
    inv: &Inventory,
    devices: Vec<NodeDevice>,
    cluster: Arc<MemCluster>,
) -> Driver {
    let opts = options(dir, name);
    std::fs::create_dir_all(dir.join(name)).unwrap();
    let cp = Checkpoint::load(&opts.checkpoint, "bench").unwrap();
    Driver::new(
        opts,
        Arc::new(inv.clone()),
        devices,
        cluster,
        Arc::new(NoSlicer),
        cp,
    )
}

/// Makes (`make`) or removes every 1g.10gb of the node's 8 GPUs.
fn static_layout(d: &DiscoverOptions, make: bool) {
    let p = gpuhook_dra::run::partitioner(d).unwrap();
    for gpu in 0..8 {
        p.with(|b| {
            if make {
                for start in 0..7 {
                    create_instance(b, gpu, "1g.10gb", Some(start)).unwrap();
                }
            } else {
                for gi in b.gpu(gpu).unwrap().instances {
                    destroy_instance(b, gpu, gi.id, &NoHolders, false).unwrap();
                }
            }
        });
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(50);
    let (sim, _) = match tools() {
        Ok(t) => t,
        Err(why) => return println!("partition bench skipped: {why}"),
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let root = node(dir, &sim);
    let d = DiscoverOptions::for_root(&root);
    let sys = dir.join("no-sys");
    println!("8 x H100 80GB in MIG mode (simulated), {n} iterations");

    static_layout(&d, true);
    let inv = gpuhook_node::discover(&d).unwrap().inventory;
    let s_pub = publish_bench(n, "static MIG: catalogue + first publication", &|| {
        gpuhook_dra::devices::catalogue(&inv, &sys)
    });
    let cluster = Arc::new(MemCluster::default());
    let devices = gpuhook_dra::devices::catalogue(&inv, &sys);
    let name = devices.iter().find(|x| x.is_mig()).unwrap().name.clone();
    let drv = driver(dir, "static", &inv, devices, cluster.clone());
    let (s_prep, s_unprep) = claim_bench(n, "static MIG", &drv, &cluster, &name).await;
    static_layout(&d, false);

    let inv = gpuhook_node::discover(&d).unwrap().inventory;
    let p = Arc::new(gpuhook_dra::run::partitioner(&d).unwrap());
    let states = p.with(|b| b.gpus()).unwrap();
    let make = || gpuhook_dra::partition::catalogue(&inv, &states, &sys, &[]);
    let p_pub = publish_bench(n, "partitionable: catalogue + first publication", &make);
    let cluster = Arc::new(MemCluster::default());
    let drv = driver(dir, "part", &inv, make(), cluster.clone()).with_partitioner(p);
    let (p_prep, p_unprep) = claim_bench(
        n,
        "partitionable (create/destroy)",
        &drv,
        &cluster,
        "gpu-0-mig-1g10gb-19-0",
    )
    .await;

    println!(
        "ratios partitionable / static (p50): publication {:.2}x, prepare {:.2}x, unprepare {:.2}x",
        p_pub / s_pub,
        p_prep / s_prep,
        p_unprep / s_unprep
    );
}
