//! Discovery against every built-in simulated node: what `gpuhook_node::discover` finds must be
//! exactly what the profile describes (GPUs, MIG devices, cap minors, majors, driver files), both
//! through the driver root's NVML and, with NVML hidden, through `/proc` alone.

// Integration tests: a failed unwrap or expect is the test failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use gpuhook_node::{discover, Capability, DiscoverOptions, DiscoverySource, Inventory};
use gpuhook_sim::materialise::libraries;
use gpuhook_sim::profile::NodeProfile;
use gpuhook_sim::{builtin_names, materialise, MaterialiseOptions, Report};

fn build(profile: &NodeProfile, dir: &Path) -> Report {
    let opts = MaterialiseOptions {
        mock_nvml: Some(gpuhook_e2e::mock_nvml_lib()),
        bin_dir: Some(gpuhook_e2e::bin_dir()),
        ldconfig: None,
    };
    materialise(profile, dir, &opts).unwrap_or_else(|e| panic!("materialise {}: {e}", profile.name))
}

fn cc(s: &str) -> (u32, u32) {
    let (a, b) = s.split_once('.').expect("compute capability major.minor");
    (a.parse().unwrap(), b.parse().unwrap())
}

fn check_devices(p: &NodeProfile, inv: &Inventory) {
    let name = &p.name;
    assert_eq!(inv.source, DiscoverySource::Nvml, "{name}");
    assert_eq!(inv.driver_version, p.driver_version, "{name}");
    assert_eq!(
        inv.cuda_driver_version.as_deref(),
        Some(p.cuda_driver_version.as_str()),
        "{name}"
    );
    assert_eq!(inv.gpus.len(), p.gpus.len(), "{name}");
    for (g, want) in inv.gpus.iter().zip(&p.gpus) {
        let ctx = format!("{name} GPU {}", want.index);
        assert_eq!(g.index, want.index, "{ctx}");
        assert_eq!(g.minor, want.minor, "{ctx}");
        assert_eq!(g.uuid, want.uuid, "{ctx}");
        assert_eq!(g.pci_bus_id, want.pci_bus_id.to_ascii_lowercase(), "{ctx}");
        assert_eq!(g.name, want.name, "{ctx}");
        assert_eq!(g.memory_mib, want.memory_mib, "{ctx}");
        assert_eq!(
            g.architecture.as_deref(),
            Some(want.architecture.as_str()),
            "{ctx}"
        );
        assert_eq!(
            g.compute_capability,
            Some(cc(&want.compute_capability)),
            "{ctx}"
        );
        assert_eq!(g.brand.as_deref(), Some(want.brand.as_str()), "{ctx}");
        assert_eq!(g.mig_enabled, want.mig_mode, "{ctx}");
        assert_eq!(g.mig_devices.len(), want.mig_devices.len(), "{ctx}");
        for (m, wm) in g.mig_devices.iter().zip(&want.mig_devices) {
            let ctx = format!("{ctx} MIG {}", wm.uuid);
            assert_eq!(m.parent_index, want.index, "{ctx}");
            assert_eq!(m.uuid, wm.uuid, "{ctx}");
            assert_eq!((m.gi_id, m.ci_id), (wm.gi_id, wm.ci_id), "{ctx}");
            assert_eq!(m.memory_mib, wm.memory_mib, "{ctx}");
            assert_eq!(m.profile.as_deref(), Some(wm.profile.as_str()), "{ctx}");
            assert_eq!(
                (m.gi_cap_minor, m.ci_cap_minor),
                (wm.gi_cap_minor, wm.ci_cap_minor),
                "{ctx}"
            );
        }
        let indexes: Vec<u32> = g.mig_devices.iter().map(|m| m.index).collect();
        let dense: Vec<u32> = (0..u32::try_from(g.mig_devices.len()).unwrap()).collect();
        assert_eq!(indexes, dense, "{ctx}: MIG indexes in NVML order");
    }
    assert_eq!(inv.majors.nvidia, 195, "{name}");
    assert_eq!(inv.majors.nvidia_uvm, Some(p.majors.nvidia_uvm), "{name}");
    assert_eq!(inv.majors.nvidia_caps, Some(p.majors.nvidia_caps), "{name}");
    assert_eq!(
        inv.majors.nvidia_caps_imex_channels, p.majors.nvidia_caps_imex_channels,
        "{name}"
    );
    let caps = inv.mig_caps.as_ref().expect("mig config/monitor caps");
    assert_eq!((caps.config_minor, caps.monitor_minor), (1, 2), "{name}");
}

fn check_files(p: &NodeProfile, report: &Report, inv: &Inventory) {
    check_libraries(p, inv);
    check_device_nodes(p, inv);
    check_other_files(p, report, inv);
}

/// Each profile library with its capability and SONAME, the `.so` links NVIDIA makes, and the
/// library folders.
fn check_libraries(p: &NodeProfile, inv: &Inventory) {
    let name = &p.name;
    let lib_dir = Path::new(&p.lib_dir);
    for lib in libraries(p) {
        let path = Path::new(&lib.dir).join(&lib.file_name);
        let found = inv.files.libraries.iter().find(|l| l.path == path);
        let found = found.unwrap_or_else(|| panic!("{name}: {} not discovered", path.display()));
        let want = if lib.i386 { "compat32" } else { lib.capability };
        assert_eq!(
            found.capability.as_str(),
            want,
            "{name}: {}",
            path.display()
        );
        assert_eq!(found.soname.as_deref(), Some(lib.soname.as_str()), "{name}");
        // symlinks.go `getDotSoSymlinks`: `libX.so -> SONAME` exactly where the host has it.
        let dev_link = path
            .with_file_name(lib.file_name.split(".so.").next().unwrap_or("").to_owned() + ".so");
        let made = inv.files.symlinks.iter().any(|l| l.link == dev_link);
        let always = ["libcuda.so", "libnvidia-opticalflow.so"]
            .iter()
            .any(|s| dev_link.ends_with(s));
        assert_eq!(
            made,
            lib.dev_link.is_some() || always,
            "{name}: {}",
            dev_link.display()
        );
    }
    assert_eq!(
        inv.files.libraries.len(),
        libraries(p).len(),
        "{name}: no extra libraries"
    );
    let mut dirs = vec![lib_dir.to_path_buf()];
    dirs.extend(p.features.lib32_dir.as_ref().map(PathBuf::from));
    assert_eq!(inv.files.library_dirs, dirs, "{name}");
}

/// Only the nodes the node has (pkg/nvcdi/common-nvml.go `controlDeviceNodeDiscoverer`), each
/// with its mode (MIG caps read-only).
fn check_device_nodes(p: &NodeProfile, inv: &Inventory) {
    let name = &p.name;
    let nodes = inv
        .files
        .device_nodes
        .as_ref()
        .expect("discovery records the nodes");
    let has = |path: &str| nodes.iter().any(|n| n.path == path);
    assert_eq!(
        has("/dev/nvidia-modeset"),
        p.features.nvidia_modeset,
        "{name}"
    );
    assert_eq!(
        has("/dev/nvidia-uvm-tools"),
        p.features.nvidia_uvm_tools,
        "{name}"
    );
    for n in nodes
        .iter()
        .filter(|n| n.path.starts_with("/dev/nvidia-caps/"))
    {
        assert!(
            n.mode == 0o444 || n.mode == 0o400,
            "{name}: {} mode {:o}",
            n.path,
            n.mode
        );
    }
}

/// The `libcuda.so` link, and binaries, firmware, sockets and config files as materialised.
fn check_other_files(p: &NodeProfile, report: &Report, inv: &Inventory) {
    let name = &p.name;
    let lib_dir = Path::new(&p.lib_dir);
    let cuda_link = inv
        .files
        .symlinks
        .iter()
        .find(|l| l.link == lib_dir.join("libcuda.so"));
    assert_eq!(
        cuda_link.map(|l| (l.capability, l.target.clone())),
        Some((Capability::Compute, lib_dir.join("libcuda.so.1"))),
        "{name}"
    );
    let mut found: Vec<PathBuf> = inv.files.binaries.iter().map(|f| f.path.clone()).collect();
    found.extend(inv.files.firmware.iter().cloned());
    found.extend(inv.files.ipc.iter().map(|f| f.path.clone()));
    found.extend(inv.files.config_files.iter().map(|f| f.path.clone()));
    // The driver's own application-profile files are not mounted: nvidia-ctk v1.20.0 mounts
    // none (tests/expectations/nvidia-ctk/workstation-full.json) and writes the container's own
    // profile instead (the setup hook's --application-profile).
    let mut want: Vec<PathBuf> = report
        .files
        .iter()
        .filter(|f| !f.contains("/nvidia-application-profiles-"))
        .map(PathBuf::from)
        .collect();
    found.sort();
    want.sort();
    assert_eq!(
        found, want,
        "{name}: binaries, firmware, sockets and config files"
    );
}

#[test]
fn discovery_matches_every_builtin_profile() {
    if !gpuhook_e2e::e2e_ready("discovery", &["ldconfig"]) {
        return;
    }
    for profile_name in builtin_names() {
        let profile = NodeProfile::builtin(profile_name).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let report = build(&profile, dir.path());
        let d = discover(&DiscoverOptions::for_root(&report.root))
            .unwrap_or_else(|e| panic!("discover {profile_name}: {e}"));
        assert!(d.warnings.is_empty(), "{profile_name}: {:?}", d.warnings);
        assert_eq!(d.inventory.driver_root, report.root);
        assert_eq!(d.inventory.dev_root, report.root);
        check_devices(&profile, &d.inventory);
        check_files(&profile, &report, &d.inventory);
    }
}

#[test]
fn without_nvml_discovery_falls_back_to_procfs() {
    if !gpuhook_e2e::e2e_ready("discovery", &["ldconfig"]) {
        return;
    }
    for profile_name in builtin_names() {
        let profile = NodeProfile::builtin(profile_name).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let report = build(&profile, dir.path());
        let lib_dir = report.root.join(profile.lib_dir.trim_start_matches('/'));
        std::fs::remove_file(lib_dir.join("libnvidia-ml.so.1")).unwrap();
        std::fs::remove_file(lib_dir.join(format!("libnvidia-ml.so.{}", profile.driver_version)))
            .unwrap();
        let d = discover(&DiscoverOptions::for_root(&report.root)).unwrap();
        let inv = &d.inventory;
        assert_eq!(inv.source, DiscoverySource::Procfs, "{profile_name}");
        assert_eq!(inv.driver_version, profile.driver_version, "{profile_name}");
        assert_eq!(inv.cuda_driver_version, None, "{profile_name}");
        let mut want: Vec<_> = profile.gpus.iter().collect();
        want.sort_by_key(|g| g.pci_bus_id.to_ascii_lowercase());
        let got: Vec<_> = inv
            .gpus
            .iter()
            .map(|g| (g.index, g.minor, g.uuid.as_str(), g.name.as_str()))
            .collect();
        let want: Vec<_> = want
            .iter()
            .enumerate()
            .map(|(i, g)| {
                (
                    u32::try_from(i).unwrap(),
                    g.minor,
                    g.uuid.as_str(),
                    g.name.as_str(),
                )
            })
            .collect();
        assert_eq!(got, want, "{profile_name}");
        assert!(
            inv.gpus.iter().all(|g| g.mig_devices.is_empty()),
            "{profile_name}"
        );
        let all = d.warnings.join("\n");
        assert!(
            all.contains("NVML unavailable") && all.contains("MIG devices need NVML"),
            "{profile_name}: {all}"
        );
    }
}
