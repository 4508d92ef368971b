//! Expectations from NVIDIA's generator (nvidia-container-toolkit v1.20.0):
//! internal/edits/device.go `fromPathOrDefault` gives each node the host node's `FileMode`
//! (permission bits) and its GID when non-zero; pkg/nvcdi/common-nvml.go `newCommonNVMLDiscoverer`
//! declares `nvidia-modeset`, `nvidia-uvm`, `nvidia-uvm-tools` only when they are found.

use super::*;
use crate::test_support::{caps, inventory};
use gpuhook_node::Capability::*;
use gpuhook_node::DevNode;

fn dev(path: &str, minor: u32, mode: u32, gid: u32) -> DevNode {
    DevNode {
        path: path.into(),
        major: 195,
        minor,
        mode,
        uid: 0,
        gid,
    }
}

/// An inventory whose discovery saw `nodes` (and nothing else) under the dev root.
fn seen(mut nodes: Vec<DevNode>) -> Inventory {
    let mut inv = inventory();
    nodes.sort();
    inv.files.device_nodes = Some(nodes);
    inv
}

fn paths(nodes: &[DeviceNode]) -> Vec<&str> {
    nodes.iter().map(|n| n.path.as_str()).collect()
}

#[test]
fn cap_nodes_keep_the_host_mode() {
    let inv = seen(vec![
        dev("/dev/nvidia1", 1, 0o666, 0),
        dev("/dev/nvidia-caps/nvidia-cap66", 66, 0o444, 0),
        dev("/dev/nvidia-caps/nvidia-cap67", 67, 0o444, 0),
    ]);
    let mig = DeviceRef::Mig {
        parent_index: 1,
        index: 0,
    };
    let nodes = device_nodes(&inv, &[mig]).unwrap();
    let modes: Vec<_> = nodes.iter().map(|n| n.file_mode).collect();
    assert_eq!(modes, [Some(0o666), Some(0o444), Some(0o444)]);
    assert!(nodes.iter().all(|n| n.uid.is_none() && n.gid.is_none()));
}

#[test]
fn non_root_group_is_kept() {
    let inv = seen(vec![
        dev("/dev/nvidiactl", 255, 0o660, 44),
        dev("/dev/nvidia0", 0, 0o660, 44),
    ]);
    let nodes = device_nodes(&inv, &[DeviceRef::Gpu { index: 0 }]).unwrap();
    assert_eq!((nodes[0].file_mode, nodes[0].gid), (Some(0o660), Some(44)));
    let ctl = control_nodes(&inv, &caps(&[Utility])).unwrap();
    assert_eq!((ctl[0].file_mode, ctl[0].gid), (Some(0o660), Some(44)));
}

#[test]
fn optional_control_nodes_only_where_they_exist() {
    let all = caps(&[Compute, Display]);
    let inv = seen(vec![
        dev("/dev/nvidiactl", 255, 0o666, 0),
        dev("/dev/nvidia-uvm", 0, 0o666, 0),
    ]);
    assert_eq!(
        paths(&control_nodes(&inv, &all).unwrap()),
        ["/dev/nvidiactl", "/dev/nvidia-uvm"],
        "no nvidia-modeset, no nvidia-uvm-tools on this node"
    );
    let inv = seen(vec![
        dev("/dev/nvidiactl", 255, 0o666, 0),
        dev("/dev/nvidia-modeset", 254, 0o666, 0),
        dev("/dev/nvidia-uvm", 0, 0o666, 0),
        dev("/dev/nvidia-uvm-tools", 1, 0o666, 0),
    ]);
    assert_eq!(
        paths(&control_nodes(&inv, &all).unwrap()),
        [
            "/dev/nvidiactl",
            "/dev/nvidia-uvm",
            "/dev/nvidia-uvm-tools",
            "/dev/nvidia-modeset"
        ]
    );
}

#[test]
fn unknown_nodes_are_declared_without_mode() {
    // An inventory not made by discovery (older cache): nodes as before, no fileMode.
    let inv = inventory();
    let ctl = control_nodes(&inv, &caps(&[Compute, Display])).unwrap();
    assert_eq!(ctl.len(), 4);
    assert!(ctl.iter().all(|n| n.file_mode.is_none()));
}
