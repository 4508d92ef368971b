//! The `/proc` files of the NVIDIA kernel modules, rendered as the real driver prints them.
//!
//! Product discovery reads majors from `/proc/devices`, GPU minors and UUIDs from
//! `/proc/driver/nvidia/gpus/*/information`, MIG cap minors from the capability files and
//! `mig-minors`, so the text must match the real layout, not just carry the numbers.

use crate::profile::{
    ci_cap_minor, gi_cap_minor, GpuProfile, NodeProfile, MIG_CONFIG_CAP_MINOR,
    MIG_MAX_COMPUTE_INSTANCES, MIG_MAX_GPU_INSTANCES, MIG_MONITOR_CAP_MINOR,
};

/// `DeviceFileMode` of a capability: 0400 for `config`, 0444 for the others.
const MODE_CONFIG: u32 = 0o400;
const MODE_READ_ALL: u32 = 0o444;
/// PCI class of a 3D controller: what data-centre GPUs report.
const PCI_3D_CONTROLLER_CLASS: u32 = 0x0003_0200;

/// `/proc/devices`: character majors (ours among a few ordinary ones, sorted), then block devices.
pub fn devices(p: &NodeProfile) -> String {
    let mut chars: Vec<(u32, &str)> = vec![
        (1, "mem"),
        (4, "/dev/vc/0"),
        (4, "tty"),
        (5, "/dev/tty"),
        (5, "/dev/console"),
        (5, "/dev/ptmx"),
        (7, "vcs"),
        (10, "misc"),
        (13, "input"),
        (195, "nvidia"),
        (226, "drm"),
        (p.majors.nvidia_uvm, "nvidia-uvm"),
        (p.majors.nvidia_caps, "nvidia-caps"),
    ];
    if let Some(imex) = p.majors.nvidia_caps_imex_channels {
        chars.push((imex, "nvidia-caps-imex-channels"));
    }
    chars.sort_by_key(|(m, _)| *m);
    let mut out = String::from("Character devices:\n");
    for (major, name) in chars {
        out.push_str(&format!("{major:3} {name}\n"));
    }
    out.push_str(
        "\nBlock devices:\n  7 loop\n  8 sd\n 11 sr\n253 device-mapper\n254 virtblk\n259 blkext\n",
    );
    out
}

/// `/proc/driver/nvidia/version`.
pub fn version(p: &NodeProfile) -> String {
    format!(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  {}  Tue Jun 17 19:46:23 UTC 2025\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14+deb12u1) \n",
        p.driver_version
    )
}

/// `/proc/driver/nvidia/params` (host view: `ModifyDeviceFiles: 1`).
pub fn params() -> String {
    const PARAMS: &[(&str, &str)] = &[
        ("ResmanDebugLevel", "4294967295"),
        ("RmLogonRC", "1"),
        ("ModifyDeviceFiles", "1"),
        ("DeviceFileUID", "0"),
        ("DeviceFileGID", "0"),
        ("DeviceFileMode", "438"),
        ("InitializeSystemMemoryAllocations", "1"),
        ("UsePageAttributeTable", "4294967295"),
        ("EnableMSI", "1"),
        ("EnablePCIeGen3", "0"),
        ("MemoryPoolSize", "0"),
        ("KMallocHeapMaxSize", "0"),
        ("VMallocHeapMaxSize", "0"),
        ("IgnoreMMIOCheck", "0"),
        ("EnableStreamMemOPs", "0"),
        ("EnableUserNUMAManagement", "1"),
        ("NvLinkDisable", "0"),
        ("RmProfilingAdminOnly", "1"),
        ("PreserveVideoMemoryAllocations", "0"),
        ("EnableS0ixPowerManagement", "0"),
        ("S0ixPowerManagementVideoMemoryThreshold", "256"),
        ("DynamicPowerManagement", "3"),
        ("DynamicPowerManagementVideoMemoryThreshold", "200"),
        ("RegisterPCIDriver", "1"),
        ("EnablePCIERelaxedOrderingMode", "0"),
        ("EnableResizableBar", "0"),
        ("EnableGpuFirmware", "18"),
        ("EnableGpuFirmwareLogs", "2"),
        ("RmNvlinkBandwidthLinkCount", "0"),
        ("EnableDbgBreakpoint", "0"),
        ("OpenRmEnableUnsupportedGpus", "1"),
        ("DmaRemapPeerMmio", "1"),
        ("ImexChannelCount", "2048"),
        ("CreateImexChannel0", "0"),
        ("GrdmaPciTopoCheckOverride", "0"),
        ("RegistryDwords", "\"\""),
        ("RegistryDwordsPerDevice", "\"\""),
        ("RmMsg", "\"\""),
        ("GpuBlacklist", "\"\""),
        ("TemporaryFilePath", "\"\""),
        ("ExcludedGpus", "\"\""),
    ];
    PARAMS.iter().map(|(k, v)| format!("{k}: {v}\n")).collect()
}

fn video_bios(g: &GpuProfile) -> &'static str {
    match g.architecture.as_str() {
        "turing" => "90.04.96.00.02",
        "ampere" => "92.00.45.00.06",
        "ada" => "95.02.5d.00.01",
        "hopper" => "96.00.99.00.01",
        _ => "??.??.??.??.??",
    }
}

/// `/proc/driver/nvidia/gpus/<bus>/information` of one GPU.
pub fn information(g: &GpuProfile, irq: u32) -> String {
    format!(
        "Model: \t\t {}\nIRQ:   \t\t {irq}\nGPU UUID: \t {}\nVideo BIOS: \t {}\nBus Type: \t PCIe\nDMA Size: \t 47 bits\nDMA Mask: \t 0x7fffffffffff\nBus Location: \t {}\nDevice Minor: \t {}\nGPU Excluded:\t No\n",
        g.name,
        g.uuid,
        video_bios(g),
        g.kernel_bus_id(),
        g.minor
    )
}

/// A capability file (`DeviceFileMinor`, `DeviceFileMode` in decimal, `DeviceFileModify`).
pub fn capability(minor: u32, mode: u32) -> String {
    format!("DeviceFileMinor: {minor}\nDeviceFileMode: {mode}\nDeviceFileModify: 1\n")
}

/// `/proc/driver/nvidia-caps/mig-minors`: every possible GI/CI minor of every GPU present.
pub fn mig_minors(p: &NodeProfile) -> String {
    let mut out = format!("config {MIG_CONFIG_CAP_MINOR}\nmonitor {MIG_MONITOR_CAP_MINOR}\n");
    let mut minors: Vec<u32> = p.gpus.iter().map(|g| g.minor).collect();
    minors.sort_unstable();
    for g in minors {
        for gi in 0..MIG_MAX_GPU_INSTANCES {
            out.push_str(&format!("gpu{g}/gi{gi}/access {}\n", gi_cap_minor(g, gi)));
            for ci in 0..MIG_MAX_COMPUTE_INSTANCES {
                out.push_str(&format!(
                    "gpu{g}/gi{gi}/ci{ci}/access {}\n",
                    ci_cap_minor(g, gi, ci)
                ));
            }
        }
    }
    out
}

/// Every `/proc` file of the profile: (path inside the driver root, contents).
pub fn proc_files(p: &NodeProfile) -> Vec<(String, String)> {
    let mut files = vec![
        ("/proc/devices".to_string(), devices(p)),
        ("/proc/driver/nvidia/version".to_string(), version(p)),
        ("/proc/driver/nvidia/params".to_string(), params()),
        (
            "/proc/driver/nvidia-caps/mig-minors".to_string(),
            mig_minors(p),
        ),
        (
            "/proc/driver/nvidia/capabilities/mig/config".to_string(),
            capability(MIG_CONFIG_CAP_MINOR, MODE_CONFIG),
        ),
        (
            "/proc/driver/nvidia/capabilities/mig/monitor".to_string(),
            capability(MIG_MONITOR_CAP_MINOR, MODE_READ_ALL),
        ),
    ];
    for (i, g) in p.gpus.iter().enumerate() {
        let irq = 30 + u32::try_from(i).unwrap_or(0) * 16;
        files.push((
            format!("/proc/driver/nvidia/gpus/{}/information", g.kernel_bus_id()),
            information(g, irq),
        ));
        // The PCI device's NUMA node, as sysfs reports it (read by the device plugin's topology).
        if let Some(node) = g.numa_node {
            let path = format!("/sys/bus/pci/devices/{}/numa_node", g.kernel_bus_id());
            files.push((path, format!("{node}\n")));
        }
        // Its PCI class (read by GPU feature discovery's `gpu.mode`): a 3D controller unless the
        // profile says the GPU drives displays.
        let class = g.pci_class.unwrap_or(PCI_3D_CONTROLLER_CLASS);
        let path = format!("/sys/bus/pci/devices/{}/class", g.kernel_bus_id());
        files.push((path, format!("0x{class:06x}\n")));
        for m in &g.mig_devices {
            let gi_dir = format!(
                "/proc/driver/nvidia/capabilities/gpu{}/mig/gi{}",
                g.minor, m.gi_id
            );
            let gi = (
                format!("{gi_dir}/access"),
                capability(m.gi_cap_minor, MODE_READ_ALL),
            );
            if !files.contains(&gi) {
                files.push(gi);
            }
            files.push((
                format!("{gi_dir}/ci{}/access", m.ci_id),
                capability(m.ci_cap_minor, MODE_READ_ALL),
            ));
        }
    }
    if let Some(machine) = &p.machine {
        let path = "/sys/class/dmi/id/product_name".to_string();
        files.push((path, format!("{machine}\n")));
    }
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_devices_lists_the_dynamic_majors_in_the_character_section() {
        let p = NodeProfile::builtin("dgx-h100").unwrap();
        let text = devices(&p);
        let chars = text.split("Block devices:").next().unwrap();
        for (major, name) in [
            (195, "nvidia"),
            (505, "nvidia-uvm"),
            (506, "nvidia-caps"),
            (507, "nvidia-caps-imex-channels"),
        ] {
            assert!(
                chars
                    .lines()
                    .any(|l| l.split_whitespace().collect::<Vec<_>>()
                        == [major.to_string().as_str(), name]),
                "{name}: {text}"
            );
        }
    }

    #[test]
    fn information_carries_minor_uuid_and_kernel_bus_id() {
        let p = NodeProfile::builtin("dgx-h100").unwrap();
        let g = &p.gpus[1];
        let text = information(g, 42);
        let field = |k: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(k))
                .map(|v| v.trim_start_matches(':').trim().to_string())
        };
        assert_eq!(field("Device Minor").unwrap(), g.minor.to_string());
        assert_eq!(field("GPU UUID").unwrap(), g.uuid);
        assert_eq!(field("Bus Location").unwrap(), "0000:2a:00.0");
        assert_eq!(field("Model").unwrap(), "NVIDIA H100 80GB HBM3");
    }

    #[test]
    fn mig_minors_agrees_with_the_profile_cap_minors() {
        let p = NodeProfile::builtin("a100-mig-mixed").unwrap();
        let text = mig_minors(&p);
        assert!(text.starts_with("config 1\nmonitor 2\ngpu0/gi0/access 3\ngpu0/gi0/ci0/access 4\n"));
        for g in &p.gpus {
            for m in &g.mig_devices {
                let gi = format!("gpu{}/gi{}/access {}\n", g.minor, m.gi_id, m.gi_cap_minor);
                let ci = format!(
                    "gpu{}/gi{}/ci{}/access {}\n",
                    g.minor, m.gi_id, m.ci_id, m.ci_cap_minor
                );
                assert!(text.contains(&gi) && text.contains(&ci), "{gi}{ci}");
            }
        }
        assert_eq!(text.lines().count(), 2 + 2 * 15 * 9);
    }
}
