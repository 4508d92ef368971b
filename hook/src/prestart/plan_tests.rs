use std::collections::BTreeSet;

use gpuhook_cdi::{edits_for, EditOptions};
use gpuhook_node::{
    Capability, ContainerSymlink, DeviceMajors, DiscoverySource, DriverFile, DriverFiles,
    DriverLibrary, Gpu, Inventory, MigControlCaps, MigDevice, INVENTORY_FORMAT_VERSION,
};

use super::*;
use crate::request::{ImexChannels, RequestSource, RequirementReport};

const LIB: &str = "/usr/lib64";

fn gpu(index: u32, minor: u32) -> Gpu {
    Gpu {
        index,
        minor,
        uuid: format!("GPU-{index}"),
        pci_bus_id: format!("00000000:{index:02x}:00.0"),
        name: "H100".into(),
        memory_mib: 81920,
        architecture: None,
        compute_capability: Some((9, 0)),
        brand: Some("nvidia".into()),
        mig_enabled: false,
        mig_devices: vec![],
    }
}

/// GPU 0 (minor 3), GPU 1 (minor 0, MIG enabled, one MIG device gi 2 / ci 0, caps 21/22).
fn inventory() -> Inventory {
    let mut g1 = gpu(1, 0);
    g1.mig_enabled = true;
    g1.mig_devices = vec![MigDevice {
        index: 0,
        parent_index: 1,
        gi_id: 2,
        ci_id: 0,
        uuid: "MIG-x".into(),
        memory_mib: 10000,
        profile: None,
        gi_cap_minor: 21,
        ci_cap_minor: 22,
    }];
    let lib = |cap, name: &str| DriverLibrary {
        capability: cap,
        path: PathBuf::from(format!("{LIB}/{name}.570.1")),
        soname: Some(format!("{name}.1")),
    };
    Inventory {
        format_version: INVENTORY_FORMAT_VERSION,
        driver_root: PathBuf::from("/drv"),
        dev_root: PathBuf::from("/drv"),
        driver_version: "570.1".into(),
        cuda_driver_version: Some("12.8".into()),
        majors: DeviceMajors {
            nvidia: 195,
            nvidia_uvm: Some(510),
            nvidia_caps: Some(511),
            nvidia_caps_imex_channels: Some(512),
        },
        gpus: vec![gpu(0, 3), g1],
        mig_caps: Some(MigControlCaps {
            config_minor: 1,
            monitor_minor: 2,
        }),
        files: DriverFiles {
            libraries: vec![
                lib(Capability::Compute, "libcuda.so"),
                lib(Capability::Utility, "libnvidia-ml.so"),
                lib(Capability::Graphics, "libGLX_nvidia.so"),
            ],
            binaries: vec![DriverFile {
                capability: Capability::Utility,
                path: "/usr/bin/nvidia-smi".into(),
            }],
            firmware: vec!["/lib/firmware/nvidia/570.1/gsp_ga10x.bin".into()],
            ipc: vec![DriverFile {
                capability: Capability::Utility,
                path: "/run/nvidia-persistenced/socket".into(),
            }],
            config_files: vec![],
            symlinks: vec![ContainerSymlink {
                capability: Capability::Compute,
                target: "libcuda.so.1".into(),
                link: format!("{LIB}/libcuda.so").into(),
            }],
            library_dirs: vec![LIB.into()],
            device_nodes: None,
        },
        source: DiscoverySource::Nvml,
    }
}

fn caps(c: &[Capability]) -> BTreeSet<Capability> {
    c.iter().copied().collect()
}

fn plan_for(devices: &[DeviceRef], c: &[Capability]) -> Plan {
    let inv = inventory();
    let edits = edits_for(
        &inv,
        devices,
        &caps(c),
        &EditOptions::new("/usr/bin/gpuhook"),
    )
    .unwrap();
    Plan::from_edits(&inv, &edits).unwrap()
}

fn resolved(devices: Vec<DeviceRef>) -> ResolvedRequest {
    ResolvedRequest {
        source: RequestSource::EnvVar,
        devices,
        foreign_cdi: vec![],
        capabilities: caps(&[Capability::Compute, Capability::Utility]),
        mig_config: false,
        mig_monitor: false,
        imex_channels: ImexChannels::None,
        mps_pipe_dir: None,
        requirements: RequirementReport::default(),
    }
}

#[test]
fn edits_become_nodes_mounts_links_and_ldcache_folders() {
    let plan = plan_for(
        &[DeviceRef::Gpu { index: 0 }],
        &[Capability::Compute, Capability::Utility],
    );
    let nodes: Vec<(&str, u32, u32, &str)> = plan
        .devices
        .iter()
        .map(|d| {
            (
                d.path.to_str().unwrap(),
                d.major,
                d.minor,
                d.host_path.to_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        nodes,
        vec![
            ("/dev/nvidia3", 195, 3, "/drv/dev/nvidia3"),
            ("/dev/nvidiactl", 195, 255, "/drv/dev/nvidiactl"),
            ("/dev/nvidia-uvm", 510, 0, "/drv/dev/nvidia-uvm"),
            ("/dev/nvidia-uvm-tools", 510, 1, "/drv/dev/nvidia-uvm-tools"),
        ]
    );
    // Container paths are the driver paths; host paths are under the driver root.
    let libcuda = plan
        .mounts
        .iter()
        .find(|m| m.container == Path::new("/usr/lib64/libcuda.so.570.1"))
        .expect("libcuda mounted");
    assert_eq!(libcuda.host, Path::new("/drv/usr/lib64/libcuda.so.570.1"));
    assert!(libcuda.options.read_only && libcuda.options.nosuid && libcuda.options.nodev);
    assert!(!plan
        .mounts
        .iter()
        .any(|m| m.container.ends_with("libGLX_nvidia.so.570.1")));
    let socket = plan
        .mounts
        .iter()
        .find(|m| m.container.ends_with("socket"))
        .expect("persistenced socket");
    assert!(!socket.options.read_only && socket.options.noexec);
    assert!(plan.mounts.iter().all(|m| !m.proc_file));
    assert_eq!(
        plan.symlinks,
        vec![("libcuda.so.1".into(), "/usr/lib64/libcuda.so".into())]
    );
    assert_eq!(plan.ldcache_folders, vec![PathBuf::from(LIB)]);
    assert_eq!(
        plan.params.as_deref(),
        Some(Path::new("/drv/proc/driver/nvidia/params"))
    );
}

#[test]
fn cgroup_rules_are_exactly_the_nodes_without_mknod() {
    let plan = plan_for(&[DeviceRef::Gpu { index: 0 }], &[Capability::Utility]);
    let lines: Vec<String> = plan.cgroup_rules().iter().map(|r| r.v1_line()).collect();
    assert_eq!(lines, vec!["c 195:3 rw", "c 195:255 rw"]);
}

#[test]
fn mig_device_gets_caps_parent_node_and_access_files() {
    let inv = inventory();
    let mig = DeviceRef::Mig {
        parent_index: 1,
        index: 0,
    };
    let mut plan = plan_for(&[mig], &[Capability::Compute]);
    plan.add_extras(&inv, &resolved(vec![mig])).unwrap();
    let paths: Vec<&str> = plan
        .devices
        .iter()
        .map(|d| d.path.to_str().unwrap())
        .collect();
    assert!(paths.starts_with(&[
        "/dev/nvidia0",
        "/dev/nvidia-caps/nvidia-cap21",
        "/dev/nvidia-caps/nvidia-cap22"
    ]));
    let proc: Vec<(&str, &str)> = plan
        .mounts
        .iter()
        .filter(|m| m.proc_file)
        .map(|m| (m.container.to_str().unwrap(), m.host.to_str().unwrap()))
        .collect();
    // gpu<N> is the parent's *minor* (0), not its index (1).
    assert_eq!(
        proc,
        vec![
            (
                "/proc/driver/nvidia/capabilities/gpu0/mig/gi2/access",
                "/drv/proc/driver/nvidia/capabilities/gpu0/mig/gi2/access"
            ),
            (
                "/proc/driver/nvidia/capabilities/gpu0/mig/gi2/ci0/access",
                "/drv/proc/driver/nvidia/capabilities/gpu0/mig/gi2/ci0/access"
            ),
        ]
    );
    assert!(plan
        .mounts
        .iter()
        .filter(|m| m.proc_file)
        .all(|m| m.options.read_only));
}

#[test]
fn mig_config_monitor_and_imex_channels() {
    let mut inv = inventory();
    let mut req = resolved(vec![]);
    req.mig_config = true;
    req.mig_monitor = true;
    req.imex_channels = ImexChannels::Ids(vec![3, 0]);
    let mut plan = Plan::default();
    plan.add_extras(&inv, &req).unwrap();
    let nodes: Vec<(String, u32, u32)> = plan
        .devices
        .iter()
        .map(|d| (d.path.display().to_string(), d.major, d.minor))
        .collect();
    assert_eq!(
        nodes,
        vec![
            ("/dev/nvidia-caps/nvidia-cap1".into(), 511, 1),
            ("/dev/nvidia-caps/nvidia-cap2".into(), 511, 2),
            ("/dev/nvidia-caps-imex-channels/channel3".into(), 512, 3),
            ("/dev/nvidia-caps-imex-channels/channel0".into(), 512, 0),
        ]
    );
    assert_eq!(plan.mounts.len(), 2);

    inv.mig_caps = None;
    let err = Plan::default()
        .add_extras(&inv, &req)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("NVIDIA_MIG_CONFIG_DEVICES=all") && err.contains("drop the variable"),
        "{err}"
    );
    inv.majors.nvidia_caps_imex_channels = None;
    req.mig_config = false;
    req.mig_monitor = false;
    let err = Plan::default()
        .add_extras(&inv, &req)
        .unwrap_err()
        .to_string();
    assert!(err.contains("NVIDIA_IMEX_CHANNELS"), "{err}");
}

#[test]
fn missing_host_sources_are_caught_before_anything_is_done() {
    let mut plan = plan_for(&[DeviceRef::Gpu { index: 0 }], &[Capability::Utility]);
    let (what, path, _) = plan.check_host().unwrap_err();
    assert_eq!(
        (what, path.to_str().unwrap()),
        ("device node", "/drv/dev/nvidia3")
    );
}

#[test]
fn merged_edits_of_two_kinds_give_each_action_once() {
    let inv = inventory();
    let gpu0 = [DeviceRef::Gpu { index: 0 }];
    let compute = caps(&[Capability::Compute]);
    let single = plan_for(&gpu0, &[Capability::Compute]);
    // An MPS share's edits: the same GPU edits, hooks through another gpuhook path, plus the
    // daemon's read-write pipe directory.
    let mut edits =
        edits_for(&inv, &gpu0, &compute, &EditOptions::new("/usr/bin/gpuhook")).unwrap();
    let mut mps = edits_for(&inv, &gpu0, &compute, &EditOptions::new("/opt/gpuhook")).unwrap();
    mps.mounts.push(gpuhook_cdi::Mount {
        host_path: "/run/mps/GPU-0/pipe".into(),
        container_path: "/tmp/nvidia-mps".into(),
        options: vec![
            "nosuid".into(),
            "nodev".into(),
            "noexec".into(),
            "rbind".into(),
        ],
        mount_type: None,
    });
    super::super::cdi_devices::merge(&mut edits, &mps);
    let merged = Plan::from_edits(&inv, &edits).unwrap();
    assert_eq!(merged.devices, single.devices);
    assert_eq!(merged.symlinks, single.symlinks);
    assert_eq!(merged.ldcache_folders, single.ldcache_folders);
    assert_eq!(merged.mounts.len(), single.mounts.len() + 1);
    let pipe = merged.mounts.last().unwrap();
    assert_eq!(pipe.container, Path::new("/tmp/nvidia-mps"));
    assert!(!pipe.options.read_only && pipe.options.nosuid && pipe.options.nodev);
}

#[path = "plan_hook_tests.rs"]
mod hooks;
