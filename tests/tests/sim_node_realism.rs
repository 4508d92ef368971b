//! The realism profiles look like the real installs they model, checked with the host's own
//! tools (`ldconfig -p`, `readelf`, `stat`) against facts from NVIDIA's packaging and tools, not
//! against the materialiser's own tables:
//! - nvidia-modprobe (modprobe-utils/nvidia-modprobe-utils.c, `nvidia_cap_mknod` →
//!   `mknod_helper`) creates `/dev/nvidia-caps/nvidia-cap<N>` with the `DeviceFileMode` of the
//!   capability's proc file: 0444 for GI/CI `access`, 0400 for `config`;
//! - the `.run` installer's layout: `libcuda.so -> libcuda.so.1 -> libcuda.so.<ver>`, the GBM
//!   backend `<libdir>/gbm/nvidia-drm_gbm.so -> ../libnvidia-allocator.so.1`, GSP firmware in
//!   `/lib/firmware/nvidia/<ver>/gsp_*.bin`, `/usr/share/nvidia/nvidia-application-profiles-<ver>-rc`;
//! - glibc's ldconfig records an i386 library that needs libc.so.6 as `(libc6)`, an x86-64 one as
//!   `(libc6,x86-64)` (sysdeps/unix/sysv/linux/x86/readelflib.c).
//!
//! Needs root (mknod).

// Integration tests: a failed unwrap or expect is the test failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;
use std::process::Command;

use gpuhook_e2e::{bin_dir, mock_nvml_lib, run_ok};
use gpuhook_sim::{materialise, MaterialiseOptions, NodeProfile};

fn build(name: &str, dir: &Path) -> std::path::PathBuf {
    let p = NodeProfile::builtin(name).unwrap();
    let opts = MaterialiseOptions {
        mock_nvml: Some(mock_nvml_lib()),
        bin_dir: Some(bin_dir()),
        ldconfig: None,
    };
    materialise(&p, &dir.join(name), &opts).unwrap_or_else(|e| panic!("{name}: {e}"));
    dir.join(name)
}

fn at(root: &Path, path: &str) -> std::path::PathBuf {
    root.join(path.trim_start_matches('/'))
}

/// `ldconfig -p` lines of the node's cache.
fn cache_lines(root: &Path) -> Vec<String> {
    let out = run_ok(
        Command::new("ldconfig")
            .arg("-p")
            .arg("-C")
            .arg(at(root, "/etc/ld.so.cache")),
    );
    out.lines().map(str::to_string).collect()
}

fn has_entry(lines: &[String], soname: &str, flags: &str, path: &str) -> bool {
    lines
        .iter()
        .any(|l| l.trim() == format!("{soname} ({flags}) => {path}"))
}

fn link(root: &Path, path: &str) -> String {
    std::fs::read_link(at(root, path))
        .unwrap_or_else(|e| panic!("{path} is a symlink: {e}"))
        .display()
        .to_string()
}

#[test]
fn headless_node_lacks_modeset_and_uvm_tools() {
    if !gpuhook_e2e::e2e_ready("sim_node_realism", &["ldconfig"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = build("l20-minimal", dir.path());
    for absent in [
        "/dev/nvidia-modeset",
        "/dev/nvidia-uvm-tools",
        "/run/nvidia-persistenced/socket",
    ] {
        assert!(
            std::fs::symlink_metadata(at(&root, absent)).is_err(),
            "{absent} must not exist"
        );
    }
    let uvm = std::fs::metadata(at(&root, "/dev/nvidia-uvm")).unwrap();
    assert!(uvm.file_type().is_char_device());
    assert_eq!(libc::minor(uvm.rdev() as libc::dev_t), 0);
    assert!(std::fs::symlink_metadata(at(&root, "/usr/lib/x86_64-linux-gnu/libcuda.so")).is_err());
    let proc_devices = std::fs::read_to_string(at(&root, "/proc/devices")).unwrap();
    assert!(proc_devices.contains(" nvidia-uvm\n"), "{proc_devices}");
}

#[test]
fn rpm_node_uses_lib64_and_minors_differ_from_indexes() {
    if !gpuhook_e2e::e2e_ready("sim_node_realism", &["ldconfig"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = build("rhel-a100", dir.path());
    let lines = cache_lines(&root);
    assert!(
        has_entry(
            &lines,
            "libcuda.so.1",
            "libc6,x86-64",
            "/usr/lib64/libcuda.so.1"
        ),
        "{lines:?}"
    );
    assert!(
        !lines.iter().any(|l| l.contains("x86_64-linux-gnu")),
        "{lines:?}"
    );
    let conf =
        std::fs::read_to_string(at(&root, "/etc/ld.so.conf.d/00-nvidia-driver.conf")).unwrap();
    assert!(conf.lines().any(|l| l == "/usr/lib64"), "{conf}");
    // NVML index 0 is bus 07 (lowest PCI address); the kernel gave it minor 1.
    let info = std::fs::read_to_string(at(
        &root,
        "/proc/driver/nvidia/gpus/0000:07:00.0/information",
    ))
    .unwrap();
    assert!(
        info.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["Device", "Minor:", "1"]),
        "{info}"
    );
    let smi = run_ok(Command::new(at(&root, "/usr/bin/nvidia-smi")).arg("-L"));
    let first = smi.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("GPU 0:") && first.contains("GPU-22adc0b9"),
        "{smi}"
    );
}

#[test]
fn mig_mode_without_instances_has_only_config_and_monitor_caps() {
    if !gpuhook_e2e::e2e_ready("sim_node_realism", &["ldconfig"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = build("h100-mig-empty", dir.path());
    let mut caps: Vec<(String, u32)> = std::fs::read_dir(at(&root, "/dev/nvidia-caps"))
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                e.metadata().unwrap().mode() & 0o777,
            )
        })
        .collect();
    caps.sort();
    assert_eq!(
        caps,
        [
            ("nvidia-cap1".to_string(), 0o400),
            ("nvidia-cap2".to_string(), 0o444)
        ]
    );
    // The MIG capability files exist; no GPU instance has an access file.
    for cap in ["config", "monitor"] {
        assert!(at(
            &root,
            &format!("/proc/driver/nvidia/capabilities/mig/{cap}")
        )
        .is_file());
    }
    let gpu0 = at(&root, "/proc/driver/nvidia/capabilities/gpu0/mig");
    assert!(!gpu0.exists() || std::fs::read_dir(&gpu0).unwrap().next().is_none());
}

#[test]
fn mig_access_cap_nodes_are_read_only_like_nvidia_modprobe_makes_them() {
    if !gpuhook_e2e::e2e_ready("sim_node_realism", &["ldconfig"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = build("a100-mig-mixed", dir.path());
    let mut seen = 0;
    for e in std::fs::read_dir(at(&root, "/dev/nvidia-caps")).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        let mode = e.metadata().unwrap().mode() & 0o777;
        let want = if name == "nvidia-cap1" { 0o400 } else { 0o444 };
        assert_eq!(mode, want, "{name}");
        seen += 1;
    }
    assert_eq!(
        seen,
        2 + 2 * 10,
        "config, monitor and a GI + CI node per MIG device"
    );
}

#[test]
fn workstation_has_i386_libraries_dev_links_gbm_and_desktop_files() {
    if !gpuhook_e2e::e2e_ready("sim_node_realism", &["ldconfig", "readelf"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = build("workstation-full", dir.path());
    let ver = "570.158.01";
    let lines = cache_lines(&root);
    for (soname, flags, dir) in [
        ("libcuda.so.1", "libc6,x86-64", "/usr/lib/x86_64-linux-gnu"),
        ("libcuda.so.1", "libc6", "/usr/lib/i386-linux-gnu"),
        ("libGLX_nvidia.so.0", "libc6", "/usr/lib/i386-linux-gnu"),
        ("libnvidia-ml.so.1", "libc6", "/usr/lib/i386-linux-gnu"),
        (
            "libnvidia-egl-gbm.so.1",
            "libc6,x86-64",
            "/usr/lib/x86_64-linux-gnu",
        ),
    ] {
        assert!(
            has_entry(&lines, soname, flags, &format!("{dir}/{soname}")),
            "{soname} ({flags}) in {dir}: {lines:?}"
        );
    }
    let elf = run_ok(Command::new("readelf").arg("-h").arg(at(
        &root,
        &format!("/usr/lib/i386-linux-gnu/libcuda.so.{ver}"),
    )));
    assert!(
        elf.contains("ELF32") && elf.contains("Intel 80386"),
        "{elf}"
    );
    let lib = "/usr/lib/x86_64-linux-gnu";
    assert_eq!(link(&root, &format!("{lib}/libcuda.so")), "libcuda.so.1");
    assert_eq!(
        link(&root, &format!("{lib}/libcuda.so.1")),
        format!("libcuda.so.{ver}")
    );
    for stem in [
        "libnvidia-ml.so",
        "libnvcuvid.so",
        "libnvidia-encode.so",
        "libnvidia-opencl.so",
    ] {
        assert_eq!(link(&root, &format!("{lib}/{stem}")), format!("{stem}.1"));
    }
    assert_eq!(
        link(&root, &format!("{lib}/gbm/nvidia-drm_gbm.so")),
        "../libnvidia-allocator.so.1"
    );
    let backend = at(&root, &format!("{lib}/gbm/nvidia-drm_gbm.so"))
        .canonicalize()
        .unwrap();
    assert_eq!(
        backend.file_name().unwrap().to_string_lossy(),
        format!("libnvidia-allocator.so.{ver}")
    );
    for file in [
        format!("/lib/firmware/nvidia/{ver}/gsp_ga10x.bin"),
        format!("/usr/share/nvidia/nvidia-application-profiles-{ver}-rc"),
        "/usr/share/glvnd/egl_vendor.d/10_nvidia.json".to_string(),
        "/etc/vulkan/icd.d/nvidia_icd.json".to_string(),
        "/usr/share/egl/egl_external_platform.d/15_nvidia_gbm.json".to_string(),
        "/usr/lib/xorg/modules/drivers/nvidia_drv.so".to_string(),
    ] {
        assert!(at(&root, &file).is_file(), "{file}");
    }
    let icd: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(at(&root, "/etc/vulkan/icd.d/nvidia_icd.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(icd["ICD"]["library_path"], "libGLX_nvidia.so.0");
}

#[test]
fn check_cli_names_the_bad_feature_field() {
    let sim = gpuhook_e2e::built("gpuhook-sim");
    let dir = tempfile::tempdir().unwrap();
    let text = run_ok(Command::new(&sim).args(["show", "workstation-full"]));
    let good = dir.path().join("ws.toml");
    std::fs::write(&good, &text).unwrap();
    run_ok(Command::new(&sim).arg("check").arg(&good));
    for (from, to, field) in [
        (
            "\"libcuda.so\"",
            "\"libcuda.so.1\"",
            "features.dev_links[0]",
        ),
        ("graphics = true", "graphics = false", "features.gbm"),
        (
            "lib32_dir = \"/usr/lib/i386-linux-gnu\"",
            "lib32_dir = \"lib32\"",
            "features.lib32_dir",
        ),
        (
            "nvidia_uvm = true",
            "nvidia_uvm = false",
            "features.nvidia_uvm_tools",
        ),
    ] {
        assert!(text.contains(from), "{from} in {text}");
        let bad = dir.path().join("bad.toml");
        std::fs::write(&bad, text.replacen(from, to, 1)).unwrap();
        let out = Command::new(&sim).arg("check").arg(&bad).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{to}: accepted");
        assert!(
            err.contains("bad.toml") && err.contains(field),
            "{to}: {err}"
        );
    }
}
