//! The per-node checks of `mock_nvml.rs`: the system calls, each GPU's identity and lookups,
//! and its MIG devices (through raw `dlsym` where `nvml-wrapper` has no call).

use gpuhook_sim::profile::GpuProfile;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};

use super::support::{arch_of, brand_of, bus_id_key, Handle, Raw};
use super::support::{INVALID_ARGUMENT, NOT_FOUND, NOT_SUPPORTED, SUCCESS};
use super::MIB;

/// Driver, CUDA and NVML versions and the device count.
pub fn check_system(name: &str, nvml: &Nvml, p: &gpuhook_sim::NodeProfile) {
    assert_eq!(
        nvml.sys_driver_version().expect("driver version"),
        p.driver_version,
        "{name}"
    );
    let (major, minor) = p
        .cuda_driver_version
        .split_once('.')
        .expect("cuda major.minor");
    let cuda =
        major.parse::<i32>().expect("major") * 1000 + minor.parse::<i32>().expect("minor") * 10;
    assert_eq!(
        nvml.sys_cuda_driver_version().expect("cuda version"),
        cuda,
        "{name}"
    );
    assert_eq!(
        nvml.sys_nvml_version().expect("nvml version"),
        format!("{major}.{}", p.driver_version)
    );
    assert_eq!(
        nvml.device_count().expect("count") as usize,
        p.gpus.len(),
        "{name}"
    );
    assert!(matches!(
        nvml.device_by_index(u32::try_from(p.gpus.len()).unwrap()),
        Err(NvmlError::InvalidArg)
    ));
}

/// What NVML says about one GPU: name, UUID, minor, index, PCI, memory, brand, architecture.
pub fn check_identity(what: &str, dev: &Device, g: &GpuProfile) {
    assert_eq!(dev.name().expect("name"), g.name, "{what}");
    assert_eq!(dev.uuid().expect("uuid"), g.uuid, "{what}");
    assert_eq!(dev.minor_number().expect("minor"), g.minor, "{what}");
    assert_eq!(dev.index().expect("index"), g.index, "{what}");
    let pci = dev.pci_info().expect("pci info");
    assert_eq!(bus_id_key(&pci.bus_id), bus_id_key(&g.pci_bus_id), "{what}");
    assert_eq!(
        pci.bus_id,
        pci.bus_id.to_ascii_uppercase(),
        "NVML prints hex in upper case"
    );
    assert_eq!(
        pci.bus_id.split(':').next().map(str::len),
        Some(8),
        "8-digit domain"
    );
    assert_eq!(
        dev.memory_info().expect("memory").total,
        g.memory_mib * MIB,
        "{what}"
    );
    assert_eq!(dev.brand().expect("brand"), brand_of(&g.brand), "{what}");
    assert_eq!(
        dev.architecture().expect("arch"),
        arch_of(&g.architecture),
        "{what}"
    );
    let cc = dev.cuda_compute_capability().expect("compute capability");
    assert_eq!(
        format!("{}.{}", cc.major, cc.minor),
        g.compute_capability,
        "{what}"
    );
}

/// Lookups by UUID and by every accepted spelling of the bus id find the same GPU.
pub fn check_lookups(what: &str, nvml: &Nvml, g: &GpuProfile) {
    let key = bus_id_key(&g.pci_bus_id);
    let short = key[4..].to_string(); // 4-digit domain
    for id in [g.pci_bus_id.clone(), key.to_ascii_lowercase(), short] {
        let by_bus = nvml
            .device_by_pci_bus_id(id.as_str())
            .expect("device by bus id");
        assert_eq!(by_bus.index().expect("index"), g.index, "{what} by {id}");
    }
    assert_eq!(
        nvml.device_by_uuid(g.uuid.as_str())
            .expect("by uuid")
            .index()
            .expect("index"),
        g.index
    );
}

/// A full GPU is not a MIG handle; for a GPU with MIG off, MIG calls are refused. Returns
/// whether MIG is off (nothing more to check).
pub fn check_mig_off(what: &str, raw: &Raw, dev: &Device, handle: Handle, g: &GpuProfile) -> bool {
    assert_eq!(
        raw.u32_out("nvmlDeviceIsMigDeviceHandle", handle),
        (SUCCESS, 0)
    );
    assert_eq!(
        raw.u32_out("nvmlDeviceGetGpuInstanceId", handle).0,
        NOT_SUPPORTED,
        "{what}"
    );
    if !g.mig_mode {
        match dev.mig_mode() {
            Ok(m) => assert_eq!((m.current, m.pending), (0, 0), "{what}"),
            Err(NvmlError::NotSupported) => {}
            Err(e) => panic!("{what}: mig_mode: {e}"),
        }
        if g.name.contains("T4") || g.name.contains("L20") {
            assert!(
                matches!(dev.mig_mode(), Err(NvmlError::NotSupported)),
                "{what} has no MIG"
            );
        }
        assert_eq!(raw.mig_by_index(handle, 0).0, NOT_SUPPORTED, "{what}");
        return true;
    }
    false
}

/// Each MIG index up to the maximum: a device of the profile or NOT_FOUND, then the bounds.
pub fn check_mig_devices(
    what: &str,
    nvml: &Nvml,
    raw: &Raw,
    dev: &Device,
    handle: Handle,
    g: &GpuProfile,
) {
    let mode = dev.mig_mode().expect("mig mode");
    assert_eq!((mode.current, mode.pending), (1, 1), "{what}");
    let (rc, max) = raw.u32_out("nvmlDeviceGetMaxMigDeviceCount", handle);
    assert_eq!(rc, SUCCESS);
    assert!(
        max as usize >= g.mig_devices.len() && max > 0,
        "{what}: max {max}"
    );
    for i in 0..max {
        let (rc, mig) = raw.mig_by_index(handle, i);
        let Some(m) = g.mig_devices.get(i as usize) else {
            assert_eq!(rc, NOT_FOUND, "{what}: MIG index {i} has no device");
            continue;
        };
        assert_eq!(rc, SUCCESS, "{what} MIG {i}");
        let mwhat = format!("{what} MIG {i} ({})", m.uuid);
        assert_eq!(
            raw.u32_out("nvmlDeviceIsMigDeviceHandle", mig),
            (SUCCESS, 1),
            "{mwhat}"
        );
        assert_eq!(
            raw.u32_out("nvmlDeviceGetGpuInstanceId", mig),
            (SUCCESS, m.gi_id),
            "{mwhat}"
        );
        assert_eq!(
            raw.u32_out("nvmlDeviceGetComputeInstanceId", mig),
            (SUCCESS, m.ci_id),
            "{mwhat}"
        );
        assert_eq!(raw.parent_of(mig), (SUCCESS, handle), "{mwhat}");
        assert_eq!(
            raw.u32_out("nvmlDeviceGetMinorNumber", mig).0,
            NOT_SUPPORTED,
            "{mwhat}"
        );
        // SAFETY: `mig` is a live handle issued by the library `nvml` wraps.
        let mdev = unsafe { Device::new(mig.cast(), nvml) };
        assert_eq!(mdev.uuid().expect("mig uuid"), m.uuid, "{mwhat}");
        assert_eq!(
            mdev.name().expect("mig name"),
            format!("{} MIG {}", g.name, m.profile)
        );
        assert_eq!(
            mdev.memory_info().expect("mig memory").total,
            m.memory_mib * MIB,
            "{mwhat}"
        );
        let by_uuid = nvml.device_by_uuid(m.uuid.as_str()).expect("MIG by uuid");
        // SAFETY: only compared, never dereferenced.
        let by_uuid = unsafe { by_uuid.handle() }.cast::<std::ffi::c_void>();
        assert_eq!(by_uuid, mig, "{mwhat}");
    }
    assert_eq!(
        raw.mig_by_index(handle, max).0,
        INVALID_ARGUMENT,
        "{what}: index == max"
    );
    assert_eq!(raw.mig_by_index(handle, u32::MAX).0, INVALID_ARGUMENT);
}
