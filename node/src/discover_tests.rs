use std::process::Command;

use super::*;
use crate::inventory::{Capability, Gpu, MigControlCaps, MigDevice};
use crate::nvml::ComputeMode;
use crate::procfs::PROC_CAPABILITIES;
use crate::testutil::{can_ldconfig, FakeRoot};

const V: &str = "570.158.01";
const LIB: &str = "/usr/lib/x86_64-linux-gnu";

/// Compiles the tiny NVML stand-in to `out` (with SONAME libnvidia-ml.so.1).
fn build_tiny_nvml(out: &Path, init_fail: bool) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/testdata/tiny_nvml.c");
    let mut cmd = Command::new("gcc");
    cmd.args(["-shared", "-fPIC", "-Wl,-soname,libnvidia-ml.so.1", "-o"])
        .arg(out)
        .arg(src);
    if init_fail {
        cmd.arg("-DINIT_FAIL");
    }
    let o = cmd.output().expect("gcc");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// A node matching the tiny NVML: proc tree, device node stand-in, libcuda, optionally NVML.
fn fake_node(nvml: Option<bool>) -> FakeRoot {
    let mut root = FakeRoot::new();
    root.write(
        "/proc/devices",
        "Character devices:\n  1 mem\n195 nvidia\n236 nvidia-caps-imex-channels\n237 nvidia-caps\n510 nvidia-uvm\n\nBlock devices:\n  8 sd\n",
    );
    root.write(
        PROC_VERSION,
        &format!("NVRM version: NVIDIA UNIX x86_64 Kernel Module  {V}  Sun\n"),
    );
    for (bus, minor, model, uuid) in [
        (
            "0000:c1:00.0",
            5,
            "NVIDIA A100-SXM4-80GB",
            "GPU-bbbbbbbb-0000-0000-0000-000000000000",
        ),
        (
            "0000:07:00.0",
            2,
            "Tesla T4",
            "GPU-aaaaaaaa-0000-0000-0000-000000000000",
        ),
    ] {
        root.write(
            &format!("/proc/driver/nvidia/gpus/{bus}/information"),
            &format!("Model: \t {model}\nGPU UUID: \t {uuid}\nBus Location: \t {bus}\nDevice Minor: \t {minor}\n"),
        );
    }
    // gi2 through mig-minors, gi9 only through the access files.
    root.write(
        "/proc/driver/nvidia-caps/mig-minors",
        "config 1\nmonitor 2\ngpu5/gi2/access 21\ngpu5/gi2/ci0/access 22\n",
    );
    root.write(
        "/proc/driver/nvidia/capabilities/gpu5/mig/gi9/access",
        "DeviceFileMinor: 84\nDeviceFileMode: 292\n",
    );
    root.write(
        "/proc/driver/nvidia/capabilities/gpu5/mig/gi9/ci0/access",
        "DeviceFileMinor: 85\n",
    );
    root.write("/dev/nvidiactl", "");
    root.lib(LIB, &format!("libcuda.so.{V}"), "libcuda.so.1", false, true);
    if let Some(init_fail) = nvml {
        build_tiny_nvml(&root.path(&format!("{LIB}/libnvidia-ml.so.{V}")), init_fail);
    }
    root.ldconfig("new");
    root
}

fn expected_gpus() -> Vec<Gpu> {
    let mig = |index, gi_id, uuid: &str, memory_mib, profile: &str, gi_cap_minor, ci_cap_minor| {
        MigDevice {
            index,
            parent_index: 1,
            gi_id,
            ci_id: 0,
            uuid: uuid.into(),
            memory_mib,
            profile: Some(profile.into()),
            gi_cap_minor,
            ci_cap_minor,
        }
    };
    vec![
        Gpu {
            index: 0,
            minor: 2,
            uuid: "GPU-aaaaaaaa-0000-0000-0000-000000000000".into(),
            pci_bus_id: "00000000:07:00.0".into(),
            name: "Tesla T4".into(),
            memory_mib: 15360,
            architecture: Some("turing".into()),
            compute_capability: Some((7, 5)),
            brand: Some("tesla".into()),
            mig_enabled: false,
            mig_devices: vec![],
        },
        Gpu {
            index: 1,
            minor: 5,
            uuid: "GPU-bbbbbbbb-0000-0000-0000-000000000000".into(),
            pci_bus_id: "00000000:c1:00.0".into(),
            name: "NVIDIA A100-SXM4-80GB".into(),
            memory_mib: 81920,
            architecture: Some("ampere".into()),
            compute_capability: Some((8, 0)),
            brand: Some("nvidia".into()),
            mig_enabled: true,
            mig_devices: vec![
                mig(
                    0,
                    2,
                    "MIG-cccccccc-0000-0000-0000-000000000000",
                    40192,
                    "3g.40gb",
                    21,
                    22,
                ),
                mig(
                    2,
                    9,
                    "MIG-dddddddd-0000-0000-0000-000000000000",
                    9728,
                    "1g.10gb",
                    84,
                    85,
                ),
            ],
        },
    ]
}

#[cfg(target_arch = "x86_64")]
#[test]
fn discovers_gpus_and_mig_devices_through_the_roots_nvml() {
    if !can_ldconfig() {
        return;
    }
    let root = fake_node(Some(false));
    let d = discover(&DiscoverOptions::for_root(root.root())).unwrap();
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    let inv = &d.inventory;
    assert_eq!(inv.source, DiscoverySource::Nvml);
    assert_eq!(inv.driver_version, V);
    assert_eq!(inv.cuda_driver_version.as_deref(), Some("12.8"));
    assert_eq!(inv.gpus, expected_gpus());
    assert_eq!(
        inv.majors,
        DeviceMajors {
            nvidia: 195,
            nvidia_uvm: Some(510),
            nvidia_caps: Some(237),
            nvidia_caps_imex_channels: Some(236)
        }
    );
    assert_eq!(
        inv.mig_caps,
        Some(MigControlCaps {
            config_minor: 1,
            monitor_minor: 2
        })
    );
    assert_eq!(inv.dev_root, root.root());
    let libs: Vec<_> = inv
        .files
        .libraries
        .iter()
        .map(|l| (l.capability, l.path.display().to_string()))
        .collect();
    assert_eq!(
        libs,
        vec![
            (Capability::Compute, format!("{LIB}/libcuda.so.{V}")),
            (Capability::Utility, format!("{LIB}/libnvidia-ml.so.{V}")),
        ]
    );
    // JSON round trip of the whole inventory (the hook's cache format).
    let json = serde_json::to_string(inv).unwrap();
    assert_eq!(&serde_json::from_str::<Inventory>(&json).unwrap(), inv);
}

#[cfg(target_arch = "x86_64")]
#[test]
fn without_nvml_full_gpus_come_from_procfs() {
    if !can_ldconfig() {
        return;
    }
    let root = fake_node(None);
    let d = discover(&DiscoverOptions::for_root(root.root())).unwrap();
    let inv = &d.inventory;
    assert_eq!(inv.source, DiscoverySource::Procfs);
    assert_eq!(inv.driver_version, V, "from libcuda.so.<version>");
    assert_eq!(inv.cuda_driver_version, None);
    let ids: Vec<_> = inv
        .gpus
        .iter()
        .map(|g| (g.index, g.minor, g.uuid.as_str(), g.pci_bus_id.as_str()))
        .collect();
    assert_eq!(
        ids,
        vec![
            (
                0,
                2,
                "GPU-aaaaaaaa-0000-0000-0000-000000000000",
                "00000000:07:00.0"
            ),
            (
                1,
                5,
                "GPU-bbbbbbbb-0000-0000-0000-000000000000",
                "00000000:c1:00.0"
            ),
        ]
    );
    assert!(inv.gpus.iter().all(|g| g.mig_devices.is_empty()));
    assert_eq!(d.warnings.len(), 1, "{:?}", d.warnings);
    assert!(
        d.warnings[0].contains("libnvidia-ml.so.1 not found") && d.warnings[0].contains("MIG"),
        "{:?}",
        d.warnings
    );
}

#[cfg(target_arch = "x86_64")]
#[test]
fn nvml_init_failure_is_a_warning_naming_library_and_error() {
    if !can_ldconfig() {
        return;
    }
    let root = fake_node(Some(true));
    let d = discover(&DiscoverOptions::for_root(root.root())).unwrap();
    assert_eq!(d.inventory.source, DiscoverySource::Procfs);
    assert_eq!(d.inventory.gpus.len(), 2);
    let w = &d.warnings[0];
    assert!(
        w.contains("Driver Not Loaded") && w.contains(&format!("libnvidia-ml.so.{V}")),
        "{w}"
    );
}

#[cfg(target_arch = "x86_64")]
#[test]
fn explicit_nvml_lib_and_compute_mode() {
    if !can_ldconfig() {
        return;
    }
    let root = fake_node(None);
    let lib = root.path("/elsewhere/libtiny.so");
    std::fs::create_dir_all(lib.parent().unwrap()).unwrap();
    build_tiny_nvml(&lib, false);
    let opts = DiscoverOptions {
        nvml_lib: Some(lib.clone()),
        ..DiscoverOptions::for_root(root.root())
    };
    let d = discover(&opts).unwrap();
    assert_eq!(d.inventory.source, DiscoverySource::Nvml);
    assert_eq!(d.inventory.gpus, expected_gpus());

    let nvml = Nvml::load(&NvmlLocation::explicit(&lib)).unwrap();
    let uuid = "GPU-bbbbbbbb-0000-0000-0000-000000000000";
    nvml.set_compute_mode(uuid, ComputeMode::ExclusiveProcess)
        .unwrap();
    assert_eq!(
        nvml.compute_mode(uuid).unwrap(),
        ComputeMode::ExclusiveProcess
    );
    let err = nvml
        .set_compute_mode("GPU-nope", ComputeMode::Default)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("GPU-nope")
            && err.contains("Not Found")
            && err.contains("nvmlDeviceGetHandleByUUID"),
        "{err}"
    );
}

#[test]
fn empty_root_is_no_driver_with_a_fix() {
    let root = FakeRoot::new();
    let err = discover(&DiscoverOptions::for_root(root.root())).unwrap_err();
    assert!(matches!(err, NodeError::NoDriver { .. }), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("--driver-root")
            && msg.contains("libcuda.so.1")
            && msg.contains("proc/driver/nvidia"),
        "{msg}"
    );
}

#[test]
fn corrupt_cache_is_an_error_naming_the_file() {
    let root = FakeRoot::new();
    root.write("/etc/ld.so.cache", "ld.so-1.7.0\0\u{ff}\u{ff}");
    let err = discover(&DiscoverOptions::for_root(root.root()))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("etc/ld.so.cache") && err.contains("ldconfig"),
        "{err}"
    );
}

#[test]
fn proc_only_node_uses_proc_version_and_warns() {
    let root = FakeRoot::new();
    root.write(
        PROC_VERSION,
        &format!("NVRM version: NVIDIA UNIX x86_64 Kernel Module  {V}  Sun\n"),
    );
    root.write(
        "/proc/driver/nvidia/gpus/0000:07:00.0/information",
        "GPU UUID: GPU-x\nBus Location: 0000:07:00.0\nDevice Minor: 0\n",
    );
    let dev = tempfile::tempdir().unwrap();
    let opts = DiscoverOptions {
        dev_root: Some(dev.path().to_path_buf()),
        ..DiscoverOptions::for_root(root.root())
    };
    let d = discover(&opts).unwrap();
    assert_eq!(d.inventory.driver_version, V);
    assert_eq!(d.inventory.majors.nvidia, 195);
    assert_eq!(d.inventory.dev_root, dev.path());
    assert_eq!(d.inventory.gpus.len(), 1);
    let all = d.warnings.join("\n");
    for needle in [
        "ld.so.cache does not exist",
        "NVML unavailable",
        "no `nvidia` character device",
        "dev/nvidiactl",
    ] {
        assert!(all.contains(needle), "missing {needle:?} in {all}");
    }
}

#[test]
fn control_minors_reads_mig_minors_as_the_full_parser_does() {
    // The driver's layout (config, monitor, then the GPU instances) and the odd cases: a later
    // line of a name, a bad minor, three words, CRLF, another order, one of the two missing.
    let mut driver = String::from("config 1\nmonitor 2\n");
    for (gpu, gi) in (0..8).flat_map(|g| (0..15).map(move |i| (g, i))) {
        let minor = 3 + gpu * 135 + gi * 9;
        driver.push_str(&format!("gpu{gpu}/gi{gi}/access {minor}\n"));
    }
    for text in [
        driver.as_str(),
        "config 1\nconfig 7\nmonitor 2\n",
        "config x\nconfig 7\nmonitor 2 extra\nmonitor 9\n",
        "gpu0/gi0/access 3\r\nmonitor 12\r\nconfig 11\r\n",
        "  config\t5  \n monitor 6\n",
        "config 1\ngpu0/gi0/access 3\n",
        "config 99999999999\nmonitor 2\n",
        "",
    ] {
        assert_eq!(
            control_minors(text),
            crate::procfs::MigMinors::parse(text).control(),
            "{text:?}"
        );
    }
    let minors = control_minors(&driver).map(|c| (c.config_minor, c.monitor_minor));
    assert_eq!(minors, Some((1, 2)));
}

#[test]
fn mig_control_caps_fall_back_to_the_capability_files() {
    let root = FakeRoot::new();
    let proc = ProcFs::new(root.root());
    assert_eq!(mig_control_caps(&proc).unwrap(), None);
    let caps = |config_minor, monitor_minor| MigControlCaps {
        config_minor,
        monitor_minor,
    };
    for (name, minor) in [("config", 1), ("monitor", 2)] {
        let text = format!("DeviceFileMinor: {minor}\nDeviceFileMode: 256\n");
        root.write(&format!("{PROC_CAPABILITIES}/mig/{name}"), &text);
    }
    assert_eq!(mig_control_caps(&proc).unwrap(), Some(caps(1, 2)));
    // mig-minors without the two names: still the capability files; with them, mig-minors.
    root.write(PROC_MIG_MINORS, "gpu0/gi0/access 3\n");
    assert_eq!(mig_control_caps(&proc).unwrap(), Some(caps(1, 2)));
    root.write(PROC_MIG_MINORS, "config 7\nmonitor 8\n");
    assert_eq!(mig_control_caps(&proc).unwrap(), Some(caps(7, 8)));
}
