//! Simulated nodes built by the materialiser, checked with the host's own tools.
//!
//! For every reference profile: the real `ldconfig -p` reads the cache and finds each driver
//! library at the right path, `stat` shows the device nodes with the profile's numbers, the
//! `/proc` files parse back to the profile, the simulated `nvidia-smi -L` agrees, and a second
//! build converges. Needs root (mknod, `ldconfig -r` chroots).

// Integration tests: a failed unwrap or expect is the test failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use gpuhook_e2e::{bin_dir, built, mock_nvml_lib, run_ok};
use gpuhook_sim::materialise::{device_nodes, libraries, MARKER_FILE};
use gpuhook_sim::{builtin_names, materialise, MaterialiseOptions, NodeProfile, SimError};

fn opts() -> MaterialiseOptions {
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
fn ld_cache(root: &Path) -> HashMap<(String, bool), String> {
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

fn check_node(root: &Path, p: &NodeProfile) {
    // Libraries through the real ldconfig's view of the cache.
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

    // Device nodes: type, numbers, mode.
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

    // /proc files parse back to the profile.
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
    let mig_minors: HashMap<&str, u32> = mig_minors
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k, v.parse().unwrap()))
        .collect();
    assert_eq!((mig_minors["config"], mig_minors["monitor"]), (1, 2));
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

    // Other driver files.
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

    // The simulated nvidia-smi finds the root from its own path.
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

#[test]
fn every_reference_profile_materialises_into_a_consistent_node() {
    if !gpuhook_e2e::e2e_ready("sim_node", &["ldconfig"]) {
        return;
    }
    for name in builtin_names() {
        let p = NodeProfile::builtin(name).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("node");
        let report = materialise(&p, &root, &opts()).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(report.device_nodes, device_nodes(&p).len());
        assert!(root.join(MARKER_FILE).is_file());
        check_node(&root, &p);
    }
}

#[test]
fn second_build_keeps_correct_nodes_and_repairs_wrong_ones() {
    if !gpuhook_e2e::e2e_ready("sim_node", &["ldconfig"]) {
        return;
    }
    let p = NodeProfile::builtin("a100-mig-mixed").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    materialise(&p, root, &opts()).unwrap();
    let ctl_inode = std::fs::metadata(root.join("dev/nvidiactl")).unwrap().ino();
    // Break things: a wrong node, a regular file where a node belongs, a truncated library.
    std::fs::remove_file(root.join("dev/nvidia1")).unwrap();
    let rdev = libc::makedev(195, 7);
    let c = std::ffi::CString::new(root.join("dev/nvidia1").to_str().unwrap()).unwrap();
    // SAFETY: c is a valid C path string; mknod has no other preconditions.
    let rc = unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o600, rdev) };
    assert_eq!(rc, 0);
    std::fs::remove_file(root.join("dev/nvidia-caps/nvidia-cap22")).unwrap();
    std::fs::write(root.join("dev/nvidia-caps/nvidia-cap22"), "not a node").unwrap();
    std::fs::write(
        root.join("usr/lib/x86_64-linux-gnu/libcuda.so.570.158.01"),
        "",
    )
    .unwrap();

    materialise(&p, root, &opts()).unwrap();
    assert_eq!(
        std::fs::metadata(root.join("dev/nvidiactl")).unwrap().ino(),
        ctl_inode,
        "correct node kept"
    );
    check_node(root, &p);
    let leftovers: Vec<_> = walk(root)
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("gpuhook-sim-tmp"))
        .collect();
    assert!(
        leftovers.is_empty(),
        "no temporary files left: {leftovers:?}"
    );
}

#[test]
fn rebuilding_with_another_profile_removes_what_no_longer_belongs() {
    if !gpuhook_e2e::e2e_ready("sim_node", &["ldconfig"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let dgx = NodeProfile::builtin("dgx-h100").unwrap();
    materialise(&dgx, root, &opts()).unwrap();
    assert!(root.join("dev/nvidia7").exists());
    let t4 = NodeProfile::builtin("t4").unwrap();
    materialise(&t4, root, &opts()).unwrap();
    check_node(root, &t4);
    assert!(
        !root.join("dev/nvidia7").exists(),
        "GPU nodes of the old profile removed"
    );
    assert!(!root.join("run/nvidia-fabricmanager/socket").exists());
    let cache = ld_cache(root);
    assert!(cache.values().all(|p| !p.contains("580.")), "{cache:?}");
    assert!(
        !cache.contains_key(&("libnvidia-nscq.so.2".to_string(), false)),
        "{cache:?}"
    );
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let path = e.path();
        if e.file_type().unwrap().is_dir() {
            out.extend(walk(&path));
        }
        out.push(path);
    }
    out
}

#[test]
fn refuses_a_non_empty_directory_that_it_did_not_build() {
    if !gpuhook_e2e::e2e_ready("sim_node", &["ldconfig"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("precious.txt"), "user data").unwrap();
    let err = materialise(&NodeProfile::builtin("t4").unwrap(), dir.path(), &opts()).unwrap_err();
    assert!(matches!(err, SimError::NotASimRoot { .. }), "{err}");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "nothing written"
    );
}

#[test]
fn missing_mock_nvml_is_a_clear_error_before_anything_is_written() {
    if !gpuhook_e2e::e2e_ready("sim_node", &["ldconfig"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut o = opts();
    o.mock_nvml = Some(dir.path().join("nope.so"));
    let err = materialise(
        &NodeProfile::builtin("t4").unwrap(),
        &dir.path().join("node"),
        &o,
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("cargo build -p gpuhook-mock-nvml"),
        "{err}"
    );
    assert!(!dir.path().join("node").exists());
}

#[test]
fn cli_builds_checks_and_rejects() {
    if !gpuhook_e2e::e2e_ready("sim_node", &["ldconfig", "setpriv"]) {
        return;
    }
    let sim = built("gpuhook-sim");
    let dir = tempfile::tempdir().unwrap();
    let out = run_ok(Command::new(&sim).arg("list"));
    assert_eq!(out.lines().count(), builtin_names().len(), "{out}");
    let root = dir.path().join("node");
    let out = run_ok(
        Command::new(&sim)
            .args(["build", "h100-mig"])
            .arg(&root)
            .arg("--mock-nvml")
            .arg(mock_nvml_lib()),
    );
    assert!(out.contains("built node h100-mig"), "{out}");
    check_node(&root, &NodeProfile::builtin("h100-mig").unwrap());

    // `show` prints a profile that `check` accepts; a broken copy is rejected naming the field.
    let good = dir.path().join("good.toml");
    std::fs::write(&good, run_ok(Command::new(&sim).args(["show", "dgx-h100"]))).unwrap();
    run_ok(Command::new(&sim).arg("check").arg(&good));
    let text = std::fs::read_to_string(&good).unwrap();
    let second_uuid = NodeProfile::builtin("dgx-h100").unwrap().gpus[1]
        .uuid
        .clone();
    let first_uuid = NodeProfile::builtin("dgx-h100").unwrap().gpus[0]
        .uuid
        .clone();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, text.replace(&second_uuid, &first_uuid)).unwrap();
    let out = Command::new(&sim).arg("check").arg(&bad).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("bad.toml")
            && err.contains(&format!("gpus[1].uuid: duplicate UUID {first_uuid}")),
        "{err}"
    );

    // Without CAP_MKNOD the build stops before writing anything.
    let target = dir.path().join("unprivileged");
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(&sim)
        .args(["build", "t4"])
        .arg(&target)
        .arg("--mock-nvml")
        .arg(mock_nvml_lib())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("needs CAP_MKNOD: run as root"),
        "{err}"
    );
    assert!(!target.exists());
}
