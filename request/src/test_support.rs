//! A small inventory for tests: GPU 0 (T4, Turing), GPU 1 (A100, MIG enabled, two MIG devices),
//! GPU 2 (H100, not MIG enabled).

use std::path::PathBuf;

use gpuhook_node::{
    DeviceMajors, DiscoverySource, DriverFiles, Gpu, Inventory, MigDevice, INVENTORY_FORMAT_VERSION,
};

pub(crate) const T4_UUID: &str = "GPU-0a1b2c3d-0000-1111-2222-333344445555";
pub(crate) const A100_UUID: &str = "GPU-1a1b2c3d-0000-1111-2222-333344445555";
pub(crate) const H100_UUID: &str = "GPU-2a1b2c3d-0000-1111-2222-333344445555";
pub(crate) const MIG0_UUID: &str = "MIG-9a1b2c3d-0000-1111-2222-000000000000";
pub(crate) const MIG1_UUID: &str = "MIG-9a1b2c3d-0000-1111-2222-000000000001";

fn gpu(index: u32, uuid: &str, pci: &str, name: &str, cc: (u32, u32), brand: &str) -> Gpu {
    Gpu {
        index,
        minor: index,
        uuid: uuid.into(),
        pci_bus_id: pci.into(),
        name: name.into(),
        memory_mib: 81920,
        architecture: None,
        compute_capability: Some(cc),
        brand: Some(brand.into()),
        mig_enabled: false,
        mig_devices: Vec::new(),
    }
}

fn mig(index: u32, gi: u32, uuid: &str) -> MigDevice {
    MigDevice {
        index,
        parent_index: 1,
        gi_id: gi,
        ci_id: 0,
        uuid: uuid.into(),
        memory_mib: 9856,
        profile: Some("1g.10gb".into()),
        gi_cap_minor: 10 + gi * 2,
        ci_cap_minor: 11 + gi * 2,
    }
}

pub(crate) fn inventory() -> Inventory {
    let mut a100 = gpu(
        1,
        A100_UUID,
        "00000000:3B:00.0",
        "NVIDIA A100-SXM4-80GB",
        (8, 0),
        "nvidia",
    );
    a100.mig_enabled = true;
    a100.mig_devices = vec![mig(0, 7, MIG0_UUID), mig(1, 8, MIG1_UUID)];
    Inventory {
        format_version: INVENTORY_FORMAT_VERSION,
        driver_root: PathBuf::from("/"),
        dev_root: PathBuf::from("/"),
        driver_version: "570.158.01".into(),
        cuda_driver_version: Some("12.8".into()),
        majors: DeviceMajors {
            nvidia: 195,
            nvidia_uvm: Some(510),
            nvidia_caps: Some(511),
            nvidia_caps_imex_channels: None,
        },
        gpus: vec![
            gpu(0, T4_UUID, "00000000:18:00.0", "Tesla T4", (7, 5), "tesla"),
            a100,
            gpu(
                2,
                H100_UUID,
                "00000000:86:00.0",
                "NVIDIA H100 80GB HBM3",
                (9, 0),
                "nvidia",
            ),
        ],
        mig_caps: None,
        files: DriverFiles::default(),
        source: DiscoverySource::Nvml,
    }
}
