//! The checks of `sim_node.rs`, one function per kind of file of a materialised node.

use std::collections::HashMap;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use gpuhook_e2e::{bin_dir, mock_nvml_lib, run_ok};
use gpuhook_sim::materialise::{device_nodes, libraries};
use gpuhook_sim::{MaterialiseOptions, NodeProfile};

pub fn opts() -> MaterialiseOptions {
    MaterialiseOptions {
        mock_nvml: Some(mock_nvml_lib()),
        bin_dir: Some(bin_dir()),
        ldconfig: None,
    }
}

fn inside(root: &Path, path: &str) -> PathBuf {
    root.join(path.trim_start_matches('/'))
}

fn major(rdev: u64) -> u32 {
    libc::major(rdev as libc::dev_t) as u32
}

fn minor(rdev: u64) -> u32 {
    libc::minor(rdev as libc::dev_t) as u32
}

/// `ldconfig -p -C <cache>` as a map (soname, i386) -> path. An entry is x86-64 (`libc6,x86-64`)
/// or i386 (plain `libc6`, what ldconfig records for an ELF32 EM_386 object needing libc.so.6).
pub fn ld_cache(root: &Path) -> HashMap<(String, bool), String> {
    let out = run_ok(
        Command::new("ldconfig")
            .arg("-p")
            .arg("-C")
            .arg(root.join("etc/ld.so.cache")),
    );
    out.lines()
        .skip(1)
        .filter_map(|l| {
            let (left, path) = l.split_once(" => ")?;
            let name = left.split_whitespace().next()?;
            let i386 = match left.split_once('(').map(|(_, f)| f.trim_end_matches(')')) {
                Some("libc6,x86-64") => false,
                Some("libc6") => true,
                other => panic!("unexpected cache flags {other:?}: {l}"),
            };
            Some(((name.to_string(), i386), path.trim().to_string()))
        })
        .collect()
}

/// `Key: value` lines of a /proc file.
fn fields(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// Every check of one materialised node against its profile.
pub fn check_node(root: &Path, p: &NodeProfile) {
    check_libraries(root, p);
    check_device_nodes(root, p);
    let mig_minors = check_proc_files(root, p);
    check_gpu_proc_files(root, p, &mig_minors);
    check_other_driver_files(root, p);
    check_nvidia_smi(root, p);
}

/// Libraries through the real ldconfig's view of the cache.
fn check_libraries(root: &Path, p: &NodeProfile) {
    let cache = ld_cache(root);
    let libs = libraries(p);
    assert!(
        libs.iter().any(|l| l.soname == "libcuda.so.1")
            && libs.iter().any(|l| l.soname == "libnvidia-ml.so.1")
    );
    for lib in &libs {
        let want = format!("{}/{}", lib.dir, lib.soname);
        assert_eq!(
            cache.get(&(lib.soname.clone(), lib.i386)),
            Some(&want),
            "{}: {} in the cache",
            p.name,
            lib.soname
        );
        let real = inside(root, &want).canonicalize().unwrap();
        assert_eq!(
            real.file_name().unwrap().to_str().unwrap(),
            lib.file_name,
            "{want} resolves to the versioned file"
        );
        assert!(real.starts_with(root), "{want} stays inside the root");
    }
    let graphics = cache.contains_key(&("libGLX_nvidia.so.0".to_string(), false));
    assert_eq!(
        graphics, p.features.graphics,
        "{}: graphics libraries iff the feature is on",
        p.name
    );
    let dir = inside(root, &p.lib_dir);
    let installed =
        NodeProfile::from_file(&dir.join(gpuhook_sim::profile::PROFILE_FILE_NAME)).unwrap();
    assert_eq!(&installed, p, "profile installed beside the mock NVML");
    assert_eq!(
        std::fs::read(dir.join(format!("libnvidia-ml.so.{}", p.driver_version))).unwrap(),
        std::fs::read(mock_nvml_lib()).unwrap()
    );
}

/// Device nodes: type, numbers, mode.
fn check_device_nodes(root: &Path, p: &NodeProfile) {
    for n in device_nodes(p) {
        let meta = std::fs::symlink_metadata(inside(root, &n.path))
            .unwrap_or_else(|e| panic!("{}: {e}", n.path));
        assert!(
            meta.file_type().is_char_device(),
            "{} is a char device",
            n.path
        );
        assert_eq!(
            (major(meta.rdev()), minor(meta.rdev())),
            (n.major, n.minor),
            "{}",
            n.path
        );
        assert_eq!(meta.mode() & 0o7777, n.mode, "{}", n.path);
    }
    for g in &p.gpus {
        let meta = std::fs::metadata(root.join(format!("dev/nvidia{}", g.minor))).unwrap();
        assert_eq!((major(meta.rdev()), minor(meta.rdev())), (195, g.minor));
    }
    let ctl = std::fs::metadata(root.join("dev/nvidiactl")).unwrap();
    assert_eq!((major(ctl.rdev()), minor(ctl.rdev())), (195, 255));
    let uvm = std::fs::metadata(root.join("dev/nvidia-uvm")).unwrap();
    assert_eq!(
        (major(uvm.rdev()), minor(uvm.rdev())),
        (p.majors.nvidia_uvm, 0)
    );
}

/// The node-wide /proc files parse back to the profile. Returns `mig-minors` as a map.
fn check_proc_files(root: &Path, p: &NodeProfile) -> HashMap<String, u32> {
    let devices = std::fs::read_to_string(root.join("proc/devices")).unwrap();
    let chars: HashMap<&str, u32> = devices
        .split("Block devices:")
        .next()
        .unwrap()
        .lines()
        .filter_map(|l| l.trim().split_once(' '))
        .filter_map(|(m, n)| Some((n, m.parse().ok()?)))
        .collect();
    assert_eq!(chars["nvidia"], 195);
    assert_eq!(chars["nvidia-uvm"], p.majors.nvidia_uvm);
    assert_eq!(chars["nvidia-caps"], p.majors.nvidia_caps);
    assert_eq!(
        chars.get("nvidia-caps-imex-channels").copied(),
        p.majors.nvidia_caps_imex_channels
    );
    let version = std::fs::read_to_string(root.join("proc/driver/nvidia/version")).unwrap();
    let first = version.lines().next().unwrap();
    assert!(
        first.starts_with("NVRM version: NVIDIA UNIX x86_64 Kernel Module  "),
        "{first}"
    );
    assert_eq!(
        first.split_whitespace().nth(7),
        Some(p.driver_version.as_str()),
        "{first}"
    );
    let params = fields(&std::fs::read_to_string(root.join("proc/driver/nvidia/params")).unwrap());
    assert_eq!(params["ModifyDeviceFiles"], "1");
    let gpu_dirs = std::fs::read_dir(root.join("proc/driver/nvidia/gpus"))
        .unwrap()
        .count();
    assert_eq!(gpu_dirs, p.gpus.len());
    let mig_minors =
        std::fs::read_to_string(root.join("proc/driver/nvidia-caps/mig-minors")).unwrap();
    let mig_minors: HashMap<String, u32> = mig_minors
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_string(), v.parse().unwrap()))
        .collect();
    assert_eq!((mig_minors["config"], mig_minors["monitor"]), (1, 2));
    mig_minors
}

/// Each GPU's /proc information and MIG capability files, and the cap device nodes.
fn check_gpu_proc_files(root: &Path, p: &NodeProfile, mig_minors: &HashMap<String, u32>) {
    for g in &p.gpus {
        let bus = g.pci_bus_id.to_lowercase();
        let info = root.join(format!("proc/driver/nvidia/gpus/{}/information", &bus[4..]));
        let info = fields(
            &std::fs::read_to_string(&info).unwrap_or_else(|e| panic!("{}: {e}", info.display())),
        );
        assert_eq!(info["Device Minor"], g.minor.to_string());
        assert_eq!(info["GPU UUID"], g.uuid);
        assert_eq!(info["Model"], g.name);
        assert_eq!(info["Bus Location"], bus[4..]);
        for m in &g.mig_devices {
            let gi_dir = format!(
                "proc/driver/nvidia/capabilities/gpu{}/mig/gi{}",
                g.minor, m.gi_id
            );
            let gi =
                fields(&std::fs::read_to_string(root.join(format!("{gi_dir}/access"))).unwrap());
            let ci = fields(
                &std::fs::read_to_string(root.join(format!("{gi_dir}/ci{}/access", m.ci_id)))
                    .unwrap(),
            );
            assert_eq!(gi["DeviceFileMinor"], m.gi_cap_minor.to_string());
            assert_eq!(ci["DeviceFileMinor"], m.ci_cap_minor.to_string());
            assert_eq!(
                mig_minors[format!("gpu{}/gi{}/access", g.minor, m.gi_id).as_str()],
                m.gi_cap_minor
            );
            assert_eq!(
                mig_minors[format!("gpu{}/gi{}/ci{}/access", g.minor, m.gi_id, m.ci_id).as_str()],
                m.ci_cap_minor
            );
            let cap = std::fs::metadata(
                root.join(format!("dev/nvidia-caps/nvidia-cap{}", m.ci_cap_minor)),
            )
            .unwrap();
            assert_eq!(
                (major(cap.rdev()), minor(cap.rdev())),
                (p.majors.nvidia_caps, m.ci_cap_minor)
            );
        }
    }
}

/// Other driver files: sockets as the features say, firmware, the EGL vendor file.
fn check_other_driver_files(root: &Path, p: &NodeProfile) {
    for (on, sock) in [
        (
            p.features.persistenced_socket,
            "run/nvidia-persistenced/socket",
        ),
        (
            p.features.fabricmanager_socket,
            "run/nvidia-fabricmanager/socket",
        ),
    ] {
        let meta = std::fs::symlink_metadata(root.join(sock));
        assert_eq!(
            meta.as_ref().is_ok_and(|m| m.file_type().is_socket()),
            on,
            "{sock}"
        );
    }
    assert!(root
        .join(format!(
            "lib/firmware/nvidia/{}/gsp_ga10x.bin",
            p.driver_version
        ))
        .is_file());
    assert_eq!(
        root.join("usr/share/glvnd/egl_vendor.d/10_nvidia.json")
            .is_file(),
        p.features.graphics
    );
}

/// The simulated nvidia-smi finds the root from its own path.
fn check_nvidia_smi(root: &Path, p: &NodeProfile) {
    let list = run_ok(
        Command::new(root.join("usr/bin/nvidia-smi"))
            .arg("-L")
            .env_remove("GPUHOOK_SIM_PROFILE"),
    );
    for g in &p.gpus {
        assert!(
            list.contains(&format!("GPU {}: {} (UUID: {})\n", g.index, g.name, g.uuid)),
            "{list}"
        );
    }
    assert_eq!(
        list.matches("  MIG ").count(),
        p.mig_devices().count(),
        "{list}"
    );
}
