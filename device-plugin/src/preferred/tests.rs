//! Expectations from NVIDIA's own tests: go-gpuallocator `gpuallocator/besteffort_test.go`
//! (topologies from `common_test.go`) and k8s-device-plugin `internal/rm/allocate_test.go`.

use gpuhook_node::topology::{GpuPlace, Link, Topology};
use gpuhook_sharing::{AdvertisedDevice, Backing, MigBacking, Resource, SharingKind};

use super::*;

pub(super) fn device(id: &str, gpu: &str, index: u32, replica: Option<u32>) -> AdvertisedDevice {
    AdvertisedDevice {
        id: id.into(),
        backing: Backing {
            gpu_uuid: gpu.into(),
            gpu_index: index,
            mig: None,
            device_name: gpu.into(),
        },
        replica,
        numa_node: None,
    }
}

pub(super) fn resource(devices: Vec<AdvertisedDevice>, replicas: u32) -> Resource {
    Resource {
        name: "nvidia.com/gpu".into(),
        sharing: if replicas > 1 {
            SharingKind::TimeSlicing
        } else {
            SharingKind::None
        },
        replicas,
        fail_requests_greater_than_one: false,
        devices,
    }
}

pub(super) fn ids(v: &[usize]) -> Vec<String> {
    v.iter().map(|i| format!("GPU-{i}")).collect()
}

/// `n` full GPUs `GPU-0..`, and a topology with `links[(a, b)] = (nvlinks, pcie level)`.
/// `((gpu a, gpu b), (nvlinks, pcie level))`.
pub(super) type PairLink = ((usize, usize), (u32, u32));
/// `(description, available, required, size, expected)`.
type Case<'a> = (&'a str, &'a [usize], &'a [usize], usize, &'a [usize]);

pub(super) fn full_gpus(n: usize, links: &[PairLink]) -> (Resource, Topology) {
    let mut topo = Topology::new();
    let mut devices = Vec::new();
    for i in 0..n {
        let index = u32::try_from(i).expect("small");
        let uuid = format!("GPU-{i}");
        devices.push(device(&uuid, &uuid, index, None));
        let place = GpuPlace {
            index,
            bus_id: format!("{i}"),
            numa_node: None,
        };
        topo.add_gpu(&uuid, place);
    }
    for ((a, b), (nvlinks, pcie)) in links {
        let link = Link {
            nvlinks: *nvlinks,
            nvswitch_links: 0,
            pcie: *pcie,
        };
        topo.set_link(&format!("GPU-{a}"), &format!("GPU-{b}"), link);
    }
    (resource(devices, 1), topo)
}

/// `common_test.go:NewDGX1VoltaNode`: NVLink counts and P2P levels (SingleSwitch = 10,
/// HostBridge = 30, CrossCPU = 50).
fn dgx1_volta() -> (Resource, Topology) {
    let mut links = Vec::new();
    let nv = [
        (0, 1, 1),
        (0, 2, 1),
        (0, 3, 2),
        (0, 4, 2),
        (1, 2, 2),
        (1, 3, 1),
        (1, 5, 2),
        (2, 3, 2),
        (2, 6, 1),
        (3, 7, 1),
        (4, 5, 1),
        (4, 6, 1),
        (4, 7, 2),
        (5, 6, 2),
        (5, 7, 1),
        (6, 7, 2),
    ];
    for a in 0..8usize {
        for b in (a + 1)..8 {
            let nvlinks = nv
                .iter()
                .find(|(x, y, _)| *x == a && *y == b)
                .map_or(0, |(_, _, n)| *n);
            let same_socket = (a < 4) == (b < 4);
            let single_switch = same_socket && a / 2 == b / 2;
            let pcie = if !same_socket {
                50
            } else if single_switch {
                10
            } else {
                30
            };
            links.push(((a, b), (nvlinks, pcie)));
        }
    }
    full_gpus(8, &links)
}

/// The cases of `besteffort_test.go:TestBestEffortAllocate`.
const VOLTA_CASES: [Case<'static>; 11] = [
    (
        "Single NVLINK, prefer same switch",
        &[0, 2, 4, 5],
        &[],
        2,
        &[4, 5],
    ),
    (
        "Single NVLINK, prefer same socket",
        &[0, 4, 5, 6],
        &[],
        2,
        &[5, 6],
    ),
    (
        "Prefer dual NVLINK same socket",
        &[0, 3, 1],
        &[],
        2,
        &[0, 3],
    ),
    (
        "Prefer dual NVLINK cross socket",
        &[0, 1, 4],
        &[],
        2,
        &[0, 4],
    ),
    (
        "Must include with allocation size 1",
        &[0, 1, 2, 3, 4, 5, 6, 7],
        &[4],
        1,
        &[4],
    ),
    (
        "Must include with allocation size 2",
        &[0, 1, 2, 3, 4, 5, 6, 7],
        &[4],
        2,
        &[4, 7],
    ),
    (
        "Must include with allocation size 4",
        &[0, 1, 2, 3, 4, 5, 6, 7],
        &[4],
        4,
        &[4, 5, 6, 7],
    ),
    (
        "Must include with unavailable device",
        &[1, 2, 3, 4, 5, 6, 7],
        &[0, 1, 2, 3],
        4,
        &[],
    ),
    (
        "Must include with full set specified",
        &[0, 1, 2, 3, 4, 5, 6, 7],
        &[0, 2, 4, 6],
        4,
        &[0, 2, 4, 6],
    ),
    (
        "Must include with too many devices specified",
        &[0, 1, 2, 3, 4, 5, 6, 7],
        &[1, 2, 3, 4, 5, 6],
        4,
        &[],
    ),
    (
        "Required too many devices than available",
        &[1, 2, 3, 4, 5],
        &[1, 2, 3, 4, 5, 6],
        1,
        &[],
    ),
];

/// `besteffort_test.go:TestBestEffortAllocate`, every case.
#[test]
fn best_effort_allocate_dgx1_volta() {
    let (res, topo) = dgx1_volta();
    for (name, available, required, size, want) in VOLTA_CASES {
        let mut got = preferred(&res, &ids(available), &ids(required), size, Some(&topo))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        got.sort();
        assert_eq!(got, ids(want), "{name}");
    }
}

/// `besteffort_test.go:TestBestEffortAllocateRetainsBestPartition`: 14 GPUs paired by two
/// NVLinks, the last pair by four; the best pair is the last set of the best partition.
#[test]
fn best_effort_retains_best_partition() {
    let mut links: Vec<_> = (0..12).step_by(2).map(|i| ((i, i + 1), (2, 50))).collect();
    links.push(((12, 13), (4, 50)));
    let (res, topo) = full_gpus(14, &links);
    let all: Vec<usize> = (0..14).collect();
    let got = preferred(&res, &ids(&all), &[], 2, Some(&topo)).expect("allocates");
    assert_eq!(got, ids(&[12, 13]));
}

#[test]
fn full_gpus_unknown_id_is_an_error_and_no_topology_takes_the_first() {
    let (res, _) = full_gpus(4, &[]);
    let err = preferred(&res, &ids(&[0, 9]), &[], 1, None).expect_err("GPU-9 unknown");
    assert!(err.to_string().contains("GPU-9"), "{err}");
    assert_eq!(
        preferred(&res, &ids(&[2, 1, 3]), &[], 2, None),
        Ok(ids(&[2, 1]))
    );
}

/// `newTestDevices`: `gpus` GPUs with `replicas` replicas each (`gpuN::r`).
fn replicated(gpus: usize, replicas: u32) -> Resource {
    let mut devices = Vec::new();
    for g in 0..gpus {
        let index = u32::try_from(g).expect("small");
        for r in 0..replicas {
            devices.push(device(
                &format!("gpu{g}::{r}"),
                &format!("gpu{g}"),
                index,
                Some(r),
            ));
        }
    }
    resource(devices, replicas)
}

fn all_ids(res: &Resource) -> Vec<String> {
    res.devices.iter().map(|d| d.id.clone()).collect()
}

fn per_gpu(allocated: &[String]) -> Vec<usize> {
    let mut counts = BTreeMap::<&str, usize>::new();
    for id in allocated {
        *counts
            .entry(id.split("::").next().unwrap_or(id))
            .or_default() += 1;
    }
    let mut v: Vec<usize> = counts.into_values().collect();
    v.sort_unstable();
    v
}

fn alloc(
    res: &Resource,
    available: &[String],
    size: usize,
    policy: AllocationPolicy,
) -> Vec<String> {
    preferred_with_policy(res, available, &[], size, None, policy).expect("allocates")
}

/// `allocate_test.go:TestDistributedAlloc` (+ `_PartiallyAllocated_DistributesAcrossDistinctGPUs`,
/// `TestDistributedAllocIsDefault`).
#[test]
fn distributed_as_nvidia() {
    let d = AllocationPolicy::Distributed;
    let r = replicated(2, 4);
    assert_eq!(per_gpu(&alloc(&r, &all_ids(&r), 2, d)), [1, 1]);
    assert_eq!(per_gpu(&alloc(&r, &all_ids(&r), 4, d)), [2, 2]);
    let r3 = replicated(3, 2);
    assert_eq!(per_gpu(&alloc(&r3, &all_ids(&r3), 3, d)), [1, 1, 1]);
    let one = replicated(1, 4);
    assert_eq!(alloc(&one, &all_ids(&one), 1, d).len(), 1);
    let two = replicated(1, 2);
    let err = preferred(&two, &all_ids(&two), &[], 5, None).expect_err("only 2 replicas");
    assert!(
        err.to_string().contains("not enough available devices"),
        "{err}"
    );
    // gpu0 has both replicas free, gpu1 one (the other is allocated): one from each.
    let partial = replicated(2, 2);
    let avail: Vec<String> = ["gpu0::0", "gpu0::1", "gpu1::1"].map(String::from).to_vec();
    assert_eq!(per_gpu(&alloc(&partial, &avail, 2, d)), [1, 1]);
    // The default policy is distributed.
    let r12 = replicated(3, 4);
    let got = preferred(&r12, &all_ids(&r12), &[], 3, None).expect("allocates");
    assert_eq!(per_gpu(&got), [1, 1, 1]);
}

/// `allocate_test.go:TestPackedAlloc` and `TestPackedVsDistributedContrast`.
#[test]
fn packed_as_nvidia() {
    let p = AllocationPolicy::Packed;
    let r = replicated(2, 4);
    assert_eq!(per_gpu(&alloc(&r, &all_ids(&r), 2, p)), [2]);
    assert_eq!(per_gpu(&alloc(&r, &all_ids(&r), 4, p)), [4]);
    assert_eq!(per_gpu(&alloc(&r, &all_ids(&r), 5, p)), [1, 4]);
    let r3 = replicated(3, 2);
    assert_eq!(per_gpu(&alloc(&r3, &all_ids(&r3), 3, p)), [1, 2]);
    let two = replicated(1, 2);
    let err = preferred_with_policy(&two, &all_ids(&two), &[], 5, None, p);
    assert!(
        matches!(err, Err(PreferredError::NotEnough { .. })),
        "{err:?}"
    );
    let dist = alloc(&r, &all_ids(&r), 4, AllocationPolicy::Distributed);
    assert_ne!(per_gpu(&dist), per_gpu(&alloc(&r, &all_ids(&r), 4, p)));
}

/// Required IDs come first and count as picked from their GPU; a more loaded GPU is avoided.
#[test]
fn required_first_and_least_loaded_gpu_preferred() {
    let r = replicated(2, 4);
    // gpu0 has 3 of 4 replicas allocated, gpu1 none: distributed takes gpu1's.
    let avail: Vec<String> = ["gpu0::3", "gpu1::0", "gpu1::1", "gpu1::2", "gpu1::3"]
        .map(String::from)
        .to_vec();
    let got = preferred(&r, &avail, &[], 2, None).expect("allocates");
    assert_eq!(per_gpu(&got), [2]);
    assert!(got.iter().all(|id| id.starts_with("gpu1")), "{got:?}");
    let req = vec!["gpu1::0".to_string()];
    let got = preferred(&r, &all_ids(&r), &req, 2, None).expect("allocates");
    assert_eq!(got[0], "gpu1::0");
    assert!(got[1].starts_with("gpu0"), "{got:?}");
}

/// MIG devices go through the greedy path (NVIDIA: MIG does not support aligned allocation).
#[test]
fn mig_devices_are_allocated_greedily() {
    let mig = |id: &str, gi| {
        let mut d = device(id, "GPU-0", 0, None);
        d.backing.mig = Some(MigBacking {
            uuid: id.into(),
            gi,
            ci: 0,
            profile: "1g.10gb".into(),
        });
        d
    };
    let res = resource(vec![mig("MIG-a", 1), mig("MIG-b", 2)], 1);
    let avail = vec!["MIG-b".to_string(), "MIG-a".to_string()];
    assert_eq!(
        preferred(&res, &avail, &[], 1, None),
        Ok(vec!["MIG-a".to_string()])
    );
}
