//! Preferred allocation on the simulated DGX H100 (8 GPUs on one NVSwitch fabric, NUMA nodes 0
//! and 1), with the topology read through the real path: the mock NVML (`Nvml::load`) and the
//! sysfs files the simulator materialises.

use gpuhook_node::topology::{LinkLevel, Topology};
use gpuhook_sim::materialise::procfs::proc_files;
use gpuhook_sim::NodeProfile;

use super::*;
use crate::health::mock_tests::Node;

fn dgx_h100() -> (Node, tempfile::TempDir, NodeProfile) {
    let text = gpuhook_sim::builtin::text("dgx-h100").expect("built-in profile");
    let profile = NodeProfile::from_toml_str(text).expect("profile parses");
    let node = Node::with_profile(text);
    let root = tempfile::tempdir().expect("root");
    for (path, contents) in proc_files(&profile) {
        if path.starts_with("/sys/") {
            let full = root.path().join(path.trim_start_matches('/'));
            std::fs::create_dir_all(full.parent().expect("parent")).expect("mkdir");
            std::fs::write(full, contents).expect("write sysfs file");
        }
    }
    (node, root, profile)
}

#[test]
fn dgx_h100_topology_and_preference() {
    let (node, root, profile) = dgx_h100();
    let topo = Topology::read(&node.nvml, root.path()).expect("topology");
    let uuid = |i: usize| {
        profile
            .gpus
            .iter()
            .find(|g| g.index as usize == i)
            .expect("gpu")
            .uuid
            .clone()
    };
    assert_eq!(topo.numa_node(&uuid(0)), Some(0));
    assert_eq!(topo.numa_node(&uuid(7)), Some(1));
    let same = topo.link(&uuid(0), &uuid(3)).expect("link");
    let cross = topo.link(&uuid(0), &uuid(4)).expect("link");
    assert_eq!(same.level(), LinkLevel::NvLink(18));
    assert_eq!((same.nvlinks, same.pcie, cross.pcie), (0, 40, 50));
    assert!(topo.score(&uuid(0), &uuid(3)) > topo.score(&uuid(0), &uuid(4)));

    let devices = (0..8)
        .map(|i| {
            let u = uuid(i);
            let index = u32::try_from(i).expect("small");
            let mut d = tests::device(&u, &u, index, None);
            d.numa_node = topo.numa_node(&u);
            d
        })
        .collect();
    let res = tests::resource(devices, 1);
    let ids = |v: &[usize]| v.iter().map(|i| uuid(*i)).collect::<Vec<_>>();
    // Four of eight: all on one NUMA node.
    let got = preferred(&res, &ids(&[0, 4, 1, 5, 2, 6, 3, 7]), &[], 4, Some(&topo)).expect("ok");
    let nodes: HashSet<_> = got.iter().map(|u| topo.numa_node(u)).collect();
    assert_eq!(nodes.len(), 1, "{got:?}");
    // Two from {0, 4, 5}: the NUMA-local pair.
    let got = preferred(&res, &ids(&[0, 4, 5]), &[], 2, Some(&topo)).expect("ok");
    assert_eq!(got, ids(&[4, 5]));
    // The same through the live preferrer, which reads the topology itself.
    let live = TopologyPreferrer {
        nvml: std::sync::Arc::clone(&node.nvml),
        root: root.path().to_path_buf(),
        policy: AllocationPolicy::Packed,
    };
    let got = live.prefer(&res, &ids(&[0, 4, 5]), &[], 2).expect("ok");
    assert_eq!(got, ids(&[4, 5]));
}
