use super::*;
use crate::testutil::FakeRoot;

const DEVICES: &str = "Character devices:\n  1 mem\n  4 /dev/vc/0\n195 nvidia-frontend\n195 nvidia\n\
    236 nvidia-caps-imex-channels\n 237 nvidia-caps\n510 nvidia-uvm\n\nBlock devices:\n  7 loop\n 511 nvidia-uvm\n";

#[test]
fn proc_devices_char_section_only() {
    let m = parse_proc_devices(DEVICES).unwrap();
    assert_eq!(m.nvidia, 195);
    assert_eq!(m.nvidia_uvm, Some(510));
    assert_eq!(m.nvidia_caps, Some(237));
    assert_eq!(m.nvidia_caps_imex_channels, Some(236));
    let old = parse_proc_devices("Character devices:\n195 nvidia-frontend\n").unwrap();
    assert_eq!((old.nvidia, old.nvidia_uvm), (195, None));
    assert!(
        parse_proc_devices("Character devices:\n  1 mem\nBlock devices:\n195 nvidia\n").is_none()
    );
    assert!(parse_proc_devices("").is_none());
}

#[test]
fn driver_version_line() {
    let v = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.158.01  Sun May 25 06:45:06 UTC 2025\n\
             GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n";
    assert_eq!(parse_driver_version(v).as_deref(), Some("570.158.01"));
    let open =
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build\n";
    assert_eq!(parse_driver_version(open).as_deref(), Some("580.159.04"));
    assert_eq!(parse_driver_version("garbage\n"), None);
    assert!(is_version("535.54") && !is_version("12") && !is_version("1..2") && !is_version("x.1"));
}

#[test]
fn gpu_information_file() {
    let text = "Model: \t\t NVIDIA A100-SXM4-80GB\nIRQ:   \t\t 42\nGPU UUID: \t GPU-0b3b1a6c-1111-2222-3333-444455556666\n\
        Video BIOS: \t 92.00.36.00.01\nBus Type: \t PCIe\nDMA Size: \t 47 bits\nBus Location: \t 0000:07:00.0\n\
        Device Minor: \t 3\nGPU Excluded:\t No\n";
    let g = parse_gpu_information(text).unwrap();
    assert_eq!(g.model, "NVIDIA A100-SXM4-80GB");
    assert_eq!(g.uuid, "GPU-0b3b1a6c-1111-2222-3333-444455556666");
    assert_eq!(g.pci_bus_id, "00000000:07:00.0");
    assert_eq!(g.minor, 3);
    assert!(parse_gpu_information("Model: x\nBus Location: 0000:07:00.0\n").is_none());
    assert_eq!(
        normalize_bus_id("0001:A1:00.0").as_deref(),
        Some("00000001:a1:00.0")
    );
    assert_eq!(normalize_bus_id("nonsense"), None);
}

#[test]
fn mig_minors_and_access_files() {
    let m = MigMinors::parse("config 1\nmonitor 2\ngpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\ngpu1/gi2/access 147\n\nbad line\n");
    assert_eq!(
        m.control(),
        Some(MigControlCaps {
            config_minor: 1,
            monitor_minor: 2
        })
    );
    assert_eq!(m.gi(0, 1), Some(12));
    assert_eq!(m.ci(0, 1, 0), Some(13));
    assert_eq!(m.gi(1, 2), Some(147));
    assert_eq!(m.gi(1, 1), None);
    assert_eq!(
        parse_device_file_minor("DeviceFileMinor: 13\nDeviceFileMode: 292\n"),
        Some(13)
    );
    assert_eq!(parse_device_file_minor("nothing"), None);
}

#[test]
fn reads_a_proc_tree_under_a_root() {
    let root = FakeRoot::new();
    let proc = ProcFs::new(root.root());
    assert!(!proc.has_driver());
    assert_eq!(proc.majors().unwrap(), None);
    assert_eq!(proc.gpus().unwrap(), vec![]);
    root.write("/proc/devices", DEVICES);
    root.write(
        PROC_VERSION,
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.158.01  x\n",
    );
    for (bus, minor) in [("0000:c1:00.0", 1), ("0000:07:00.0", 0)] {
        root.write(
            &format!("{PROC_GPUS}/{bus}/information"),
            &format!(
                "Model: T4\nGPU UUID: GPU-{minor}\nBus Location: {bus}\nDevice Minor: {minor}\n"
            ),
        );
    }
    root.write(
        &ProcFs::mig_access_file(1, 3, Some(0)),
        "DeviceFileMinor: 31\nDeviceFileMode: 292\n",
    );
    assert!(proc.has_driver());
    assert_eq!(proc.majors().unwrap().unwrap().nvidia_uvm, Some(510));
    assert_eq!(
        proc.driver_version().unwrap().as_deref(),
        Some("570.158.01")
    );
    let gpus = proc.gpus().unwrap();
    assert_eq!(
        gpus.iter().map(|g| g.minor).collect::<Vec<_>>(),
        vec![0, 1],
        "sorted by bus id"
    );
    assert_eq!(
        proc.capability_minor("gpu1/mig/gi3/ci0/access").unwrap(),
        Some(31)
    );
    assert_eq!(proc.capability_minor("gpu1/mig/gi3/access").unwrap(), None);
    root.write(
        &format!("{PROC_GPUS}/0000:08:00.0/information"),
        "Model: broken\n",
    );
    let err = proc.gpus().unwrap_err().to_string();
    assert!(
        err.contains("0000:08:00.0/information") && err.contains("Device Minor"),
        "{err}"
    );
}

#[test]
fn mig_minors_ignore_malformed_names_and_keep_the_first_of_duplicates() {
    let m = MigMinors::parse(
        "gpu0/gi1/access 12\ngpu0/gi1/access 99\ngpuX/gi1/access 5\ngpu0/gi/access 6\n\
         gpu0/gi2/ci/access 7\ngpu0/gi2/ci1/access\ngpu3/gi4/ci5/access 42\nconfig one\n",
    );
    assert_eq!(m.gi(0, 1), Some(12));
    assert_eq!(m.ci(3, 4, 5), Some(42));
    assert_eq!(m.get("gpu3/gi4/ci5/access"), Some(42));
    assert_eq!(m.get("gpu0/gi2/ci/access"), None);
    assert_eq!(m.control(), None);
}
