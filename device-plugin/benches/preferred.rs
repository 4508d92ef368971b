//! Benchmark (numbers printed, nothing asserted) of GetPreferredAllocation's best-effort search
//! (issue #22: NVIDIA's enumeration of every partition costs ~22 million partitions, 10-20 s, for
//! 3 of 16 GPUs). Measures `preferred::preferred` for 16 full GPUs asking 3 and 8, on two
//! topologies (two NVLink islands of 8; pseudo-random pair scores that defeat the bound), against
//! a baseline measured in the same run: 8 GPUs asking 2 (two islands of 4, a DGX-1-sized search
//! NVIDIA's enumeration handles at once). Prints median and max per case and the ratio of the
//! medians to the baseline's.
//!
//! `cargo bench -p gpuhook-device-plugin --bench preferred`
#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark: a panic is a failed run

use std::time::{Duration, Instant};

use gpuhook_device_plugin::preferred::preferred;
use gpuhook_node::topology::{GpuPlace, Link, Topology};
use gpuhook_sharing::{AdvertisedDevice, Backing, Resource, SharingKind};

/// `n` full GPUs `GPU-0..` and a topology whose pair `(a, b)` has `link(a, b)` =
/// (NVLinks, PCIe level).
fn gpus(n: usize, link: impl Fn(usize, usize) -> (u32, u32)) -> (Resource, Topology, Vec<String>) {
    let mut topo = Topology::new();
    let mut devices = Vec::new();
    for i in 0..n {
        let index = u32::try_from(i).unwrap();
        let uuid = format!("GPU-{i}");
        devices.push(AdvertisedDevice {
            id: uuid.clone(),
            backing: Backing {
                gpu_uuid: uuid.clone(),
                gpu_index: index,
                mig: None,
                device_name: uuid.clone(),
            },
            replica: None,
            numa_node: None,
        });
        let place = GpuPlace {
            index,
            bus_id: format!("{i}"),
            numa_node: None,
        };
        topo.add_gpu(&uuid, place);
    }
    for a in 0..n {
        for b in (a + 1)..n {
            let (nvlinks, pcie) = link(a, b);
            let l = Link {
                nvlinks,
                nvswitch_links: 0,
                pcie,
            };
            topo.set_link(&format!("GPU-{a}"), &format!("GPU-{b}"), l);
        }
    }
    let ids = devices.iter().map(|d| d.id.clone()).collect();
    let res = Resource {
        name: "nvidia.com/gpu".into(),
        sharing: SharingKind::None,
        replicas: 1,
        fail_requests_greater_than_one: false,
        devices,
    };
    (res, topo, ids)
}

fn islands(size: usize) -> impl Fn(usize, usize) -> (u32, u32) {
    move |a, b| {
        if a / size == b / size {
            (2, 10)
        } else {
            (0, 50)
        }
    }
}

fn scattered(a: usize, b: usize) -> (u32, u32) {
    let mut x = u32::try_from(a * 16 + b).unwrap() ^ 0x2545_f491;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    (x % 7, 10 + 10 * (x % 4))
}

/// (median, max) of `runs` answers for `size` of the GPUs.
fn time(
    case: &(Resource, Topology, Vec<String>),
    size: usize,
    runs: usize,
) -> (Duration, Duration) {
    let (res, topo, ids) = case;
    let mut v: Vec<Duration> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            let got = preferred(res, ids, &[], size, Some(topo)).unwrap();
            let d = t.elapsed();
            assert_eq!(got.len(), size);
            d
        })
        .collect();
    v.sort();
    (v[v.len() / 2], v[v.len() - 1])
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let runs = 21;
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let (base, base_max) = time(&gpus(8, islands(4)), 2, runs);
    println!(
        "baseline: 8 GPUs (two islands of 4), ask 2: median {:.3} ms, max {:.3} ms ({runs} runs)",
        ms(base),
        ms(base_max)
    );
    let sixteen_islands = gpus(16, islands(8));
    let sixteen_scattered = gpus(16, scattered);
    for (name, case) in [
        ("two islands of 8", &sixteen_islands),
        ("scattered scores", &sixteen_scattered),
    ] {
        for size in [3, 8] {
            let (med, max) = time(case, size, runs);
            println!(
                "16 GPUs ({name}), ask {size}: median {:.3} ms, max {:.3} ms; ratio to baseline {:.1}",
                ms(med),
                ms(max),
                med.as_secs_f64() / base.as_secs_f64()
            );
        }
    }
}
