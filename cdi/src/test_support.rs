//! A hand-built inventory for unit tests: GPU 0 (whole, minor 0) and GPU 1 (minor 1, MIG enabled,
//! two MIG devices), driver root `/`, dev root `/run/nvidia/driver`.

use std::path::PathBuf;

use gpuhook_node::*;

pub const GPU0_UUID: &str = "GPU-11111111-2222-3333-4444-555555555555";
pub const GPU1_UUID: &str = "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee";
pub const MIG0_UUID: &str = "MIG-00000000-1111-2222-3333-444444444444";
pub const MIG1_UUID: &str = "MIG-55555555-6666-7777-8888-999999999999";

fn gpu(index: u32, uuid: &str, mig: Vec<MigDevice>) -> Gpu {
    Gpu {
        index,
        minor: index,
        uuid: uuid.into(),
        pci_bus_id: format!("00000000:0{index}:00.0"),
        name: "NVIDIA H100 80GB HBM3".into(),
        memory_mib: 81559,
        architecture: Some("hopper".into()),
        compute_capability: Some((9, 0)),
        brand: Some("nvidia".into()),
        mig_enabled: !mig.is_empty(),
        mig_devices: mig,
    }
}

fn mig(index: u32, gi: u32, ci: u32, uuid: &str, gi_cap: u32, ci_cap: u32) -> MigDevice {
    MigDevice {
        index,
        parent_index: 1,
        gi_id: gi,
        ci_id: ci,
        uuid: uuid.into(),
        memory_mib: 9856,
        profile: Some("1g.10gb".into()),
        gi_cap_minor: gi_cap,
        ci_cap_minor: ci_cap,
    }
}

fn lib(capability: Capability, name: &str, soname: &str) -> DriverLibrary {
    DriverLibrary {
        capability,
        path: PathBuf::from(format!("/usr/lib/x86_64-linux-gnu/{name}")),
        soname: Some(soname.into()),
    }
}

pub fn inventory() -> Inventory {
    let dir = "/usr/lib/x86_64-linux-gnu";
    Inventory {
        format_version: INVENTORY_FORMAT_VERSION,
        driver_root: PathBuf::from("/"),
        dev_root: PathBuf::from("/run/nvidia/driver"),
        driver_version: "570.158.01".into(),
        cuda_driver_version: Some("12.8".into()),
        majors: DeviceMajors {
            nvidia: 195,
            nvidia_uvm: Some(510),
            nvidia_caps: Some(511),
            nvidia_caps_imex_channels: None,
        },
        gpus: vec![
            gpu(0, GPU0_UUID, vec![]),
            gpu(
                1,
                GPU1_UUID,
                vec![
                    mig(0, 7, 0, MIG0_UUID, 66, 67),
                    mig(1, 8, 0, MIG1_UUID, 75, 76),
                ],
            ),
        ],
        mig_caps: Some(MigControlCaps {
            config_minor: 1,
            monitor_minor: 2,
        }),
        files: DriverFiles {
            libraries: vec![
                lib(Capability::Compute, "libcuda.so.570.158.01", "libcuda.so.1"),
                lib(
                    Capability::Utility,
                    "libnvidia-ml.so.570.158.01",
                    "libnvidia-ml.so.1",
                ),
                lib(
                    Capability::Graphics,
                    "libEGL_nvidia.so.570.158.01",
                    "libEGL_nvidia.so.0",
                ),
            ],
            binaries: vec![
                DriverFile {
                    capability: Capability::Utility,
                    path: "/usr/bin/nvidia-smi".into(),
                },
                DriverFile {
                    capability: Capability::Compute,
                    path: "/usr/bin/nvidia-cuda-mps-control".into(),
                },
            ],
            firmware: vec!["/lib/firmware/nvidia/570.158.01/gsp_ga10x.bin".into()],
            ipc: vec![DriverFile {
                capability: Capability::Utility,
                path: "/run/nvidia-persistenced/socket".into(),
            }],
            config_files: vec![DriverFile {
                capability: Capability::Graphics,
                path: "/usr/share/glvnd/egl_vendor.d/10_nvidia.json".into(),
            }],
            symlinks: vec![
                ContainerSymlink {
                    capability: Capability::Compute,
                    target: "libcuda.so.1".into(),
                    link: format!("{dir}/libcuda.so").into(),
                },
                ContainerSymlink {
                    capability: Capability::Compute,
                    target: "libcuda.so.570.158.01".into(),
                    link: format!("{dir}/libcuda.so.1").into(),
                },
            ],
            library_dirs: vec![dir.into()],
            device_nodes: None,
        },
        source: DiscoverySource::Nvml,
    }
}

pub fn caps(list: &[Capability]) -> std::collections::BTreeSet<Capability> {
    list.iter().copied().collect()
}
