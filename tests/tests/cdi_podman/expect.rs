//! What `cdi_podman.rs` expects from a profile (never from the spec under test): the device
//! nodes each request selects, the control nodes every GPU container gets, the requests to run.

use std::collections::BTreeMap;

use gpuhook_sim::profile::NodeProfile;

pub const NVIDIA_MAJOR: u32 = 195;

/// A device node the container may or may not see: path -> (major, minor).
pub type Nodes = BTreeMap<String, (u32, u32)>;

/// What a request selects, from the profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Select {
    Gpu(usize),
    Mig(usize, usize),
    All,
}

pub fn gpu_node(p: &NodeProfile, gpu: usize) -> (String, (u32, u32)) {
    let minor = p.gpus[gpu].minor;
    (format!("/dev/nvidia{minor}"), (NVIDIA_MAJOR, minor))
}

pub fn mig_nodes(p: &NodeProfile, gpu: usize, mig: usize) -> Nodes {
    let m = &p.gpus[gpu].mig_devices[mig];
    let caps = p.majors.nvidia_caps;
    let mut out: Nodes = [gpu_node(p, gpu)].into_iter().collect();
    for cap in [m.gi_cap_minor, m.ci_cap_minor] {
        out.insert(format!("/dev/nvidia-caps/nvidia-cap{cap}"), (caps, cap));
    }
    out
}

/// Every per-device node of the node (GPU nodes and MIG cap nodes).
pub fn every_device_node(p: &NodeProfile) -> Nodes {
    let mut out = Nodes::new();
    for (g, gpu) in p.gpus.iter().enumerate() {
        out.extend([gpu_node(p, g)]);
        for m in 0..gpu.mig_devices.len() {
            out.extend(mig_nodes(p, g, m));
        }
    }
    out
}

/// The per-device nodes a selection must show.
pub fn selected_nodes(p: &NodeProfile, sel: Select) -> Nodes {
    match sel {
        Select::Gpu(g) => [gpu_node(p, g)].into_iter().collect(),
        Select::Mig(g, m) => mig_nodes(p, g, m),
        Select::All => {
            let mut out = Nodes::new();
            for (g, gpu) in p.gpus.iter().enumerate() {
                if gpu.mig_mode {
                    for m in 0..gpu.mig_devices.len() {
                        out.extend(mig_nodes(p, g, m));
                    }
                } else {
                    out.extend([gpu_node(p, g)]);
                }
            }
            out
        }
    }
}

/// Control nodes a node may lack.
pub const OPTIONAL_CONTROL_NODES: [&str; 3] = [
    "/dev/nvidia-modeset",
    "/dev/nvidia-uvm",
    "/dev/nvidia-uvm-tools",
];

/// Control nodes every GPU container gets.
pub fn control_nodes(p: &NodeProfile) -> Nodes {
    let mut out: Nodes = [("/dev/nvidiactl".to_string(), (NVIDIA_MAJOR, 255))]
        .into_iter()
        .collect();
    if p.features.nvidia_uvm {
        out.insert("/dev/nvidia-uvm".into(), (p.majors.nvidia_uvm, 0));
    }
    if p.features.nvidia_uvm_tools {
        out.insert("/dev/nvidia-uvm-tools".into(), (p.majors.nvidia_uvm, 1));
    }
    if p.features.nvidia_modeset {
        out.insert("/dev/nvidia-modeset".into(), (NVIDIA_MAJOR, 254));
    }
    out
}

/// The requests to try on a node: (CDI device name, selection).
pub fn requests(p: &NodeProfile, names: &[String]) -> Vec<(String, Select)> {
    let mut out = Vec::new();
    let whole: Vec<usize> = (0..p.gpus.len()).filter(|&g| !p.gpus[g].mig_mode).collect();
    if let Some(&g) = whole.first() {
        out.push((p.gpus[g].index.to_string(), Select::Gpu(g)));
    }
    // A UUID of another device than the index request when there is one.
    if let Some(&g) = whole.last() {
        out.push((p.gpus[g].uuid.clone(), Select::Gpu(g)));
    }
    let migs: Vec<(usize, usize)> = p
        .gpus
        .iter()
        .enumerate()
        .flat_map(|(g, gpu)| (0..gpu.mig_devices.len()).map(move |m| (g, m)))
        .collect();
    if let Some(&(g, m)) = migs.first() {
        out.push((format!("{}:{m}", p.gpus[g].index), Select::Mig(g, m)));
    }
    if let Some(&(g, m)) = migs.last() {
        out.push((p.gpus[g].mig_devices[m].uuid.clone(), Select::Mig(g, m)));
    }
    out.push(("all".into(), Select::All));
    for (name, _) in &out {
        assert!(
            names.contains(name),
            "{}: generated spec has no device {name}; it has {names:?}",
            p.name
        );
    }
    out
}
