//! Test nodes: inventories built from the simulated node profiles (`sim/profiles`).
#![allow(dead_code)]

use std::path::PathBuf;

use gpuhook_node::{
    DeviceMajors, DiscoverySource, DriverFiles, Gpu, Inventory, MigDevice, INVENTORY_FORMAT_VERSION,
};
use gpuhook_sim::profile::{GpuProfile, NodeProfile};

fn gpu(g: &GpuProfile) -> Gpu {
    let cc = g
        .compute_capability
        .split_once('.')
        .map(|(a, b)| (a.parse().unwrap(), b.parse().unwrap()));
    Gpu {
        index: g.index,
        minor: g.minor,
        uuid: g.uuid.clone(),
        pci_bus_id: g.pci_bus_id.clone(),
        name: g.name.clone(),
        memory_mib: g.memory_mib,
        architecture: Some(g.architecture.clone()),
        compute_capability: cc,
        brand: Some(g.brand.clone()),
        mig_enabled: g.mig_mode,
        mig_devices: g
            .mig_devices
            .iter()
            .zip(0..)
            .map(|(m, index)| MigDevice {
                index,
                parent_index: g.index,
                gi_id: m.gi_id,
                ci_id: m.ci_id,
                uuid: m.uuid.clone(),
                memory_mib: m.memory_mib,
                profile: Some(m.profile.clone()),
                gi_cap_minor: m.gi_cap_minor,
                ci_cap_minor: m.ci_cap_minor,
            })
            .collect(),
    }
}

/// The inventory discovery would make of the simulated node `profile` (GPU facts only).
pub fn inventory_of(p: &NodeProfile) -> Inventory {
    Inventory {
        format_version: INVENTORY_FORMAT_VERSION,
        driver_root: PathBuf::from("/"),
        dev_root: PathBuf::from("/"),
        driver_version: p.driver_version.clone(),
        cuda_driver_version: Some(p.cuda_driver_version.clone()),
        majors: DeviceMajors {
            nvidia: 195,
            nvidia_uvm: Some(p.majors.nvidia_uvm),
            nvidia_caps: Some(p.majors.nvidia_caps),
            nvidia_caps_imex_channels: None,
        },
        gpus: p.gpus.iter().map(gpu).collect(),
        mig_caps: None,
        files: DriverFiles::default(),
        source: DiscoverySource::Nvml,
    }
}

/// A built-in simulated node's inventory.
pub fn node(name: &str) -> Inventory {
    inventory_of(&NodeProfile::builtin(name).unwrap())
}
