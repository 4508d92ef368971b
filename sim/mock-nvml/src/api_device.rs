//! Per-device query entry points (GPUs and, where NVML allows it, MIG devices).
//!
//! A MIG handle answers with its own name, UUID and memory and with its parent's PCI info, brand,
//! architecture and compute capability; GPU-only properties (minor number, index, MIG mode,
//! setting the compute mode) are `NVML_ERROR_NOT_SUPPORTED` on it, so consumers must go through
//! `nvmlDeviceGetDeviceHandleFromMigDeviceHandle` as they have to on a real node.

use std::os::raw::{c_char, c_int, c_uint};

use crate::ffi::{
    self, NvmlDevice, NvmlMemory, NvmlMemoryV2, NvmlPciInfo, NvmlPciInfoV1, NvmlReturn,
};
use crate::out::{fill_array, guard, nonnull, put, put_str};
use crate::state;
use crate::table::{Dev, Table};

/// Resolves `device` after checking init, then runs `f`.
pub(crate) fn with_device(
    device: NvmlDevice,
    f: impl FnOnce(&'static Table, Dev<'static>) -> Result<(), NvmlReturn>,
) -> NvmlReturn {
    guard(|| {
        let t = state::table()?;
        let dev = t.resolve(device)?;
        f(t, dev)
    })
}

/// GPU-xxxx or MIG-xxxx.
///
/// # Safety
/// `uuid` must be null or valid for writes of `length` bytes.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUUID(
    device: NvmlDevice,
    uuid: *mut c_char,
    length: c_uint,
) -> NvmlReturn {
    // SAFETY: forwarded caller contract.
    with_device(device, |_, d| unsafe { put_str(uuid, length, d.uuid()) })
}

/// Product name; a MIG device is `<parent name> MIG <profile>`.
///
/// # Safety
/// `name` must be null or valid for writes of `length` bytes.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetName(
    device: NvmlDevice,
    name: *mut c_char,
    length: c_uint,
) -> NvmlReturn {
    // SAFETY: forwarded caller contract.
    with_device(device, |_, d| unsafe { put_str(name, length, d.name()) })
}

/// `/dev/nvidia<minor>`; `NOT_SUPPORTED` on a MIG handle.
///
/// # Safety
/// `minor_number` must be null or valid for a write of an `unsigned int`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMinorNumber(
    device: NvmlDevice,
    minor_number: *mut c_uint,
) -> NvmlReturn {
    // SAFETY: forwarded caller contract.
    with_device(device, |_, d| unsafe {
        put(minor_number, d.whole_gpu()?.minor)
    })
}

/// NVML index; `NOT_SUPPORTED` on a MIG handle.
///
/// # Safety
/// `index` must be null or valid for a write of an `unsigned int`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetIndex(device: NvmlDevice, index: *mut c_uint) -> NvmlReturn {
    // SAFETY: forwarded caller contract.
    with_device(device, |_, d| unsafe { put(index, d.whole_gpu()?.index) })
}

fn pci_info(d: Dev<'_>) -> NvmlPciInfo {
    let g = d.gpu();
    let mut info = NvmlPciInfo {
        bus_id_legacy: [0; ffi::NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE],
        domain: g.pci.domain,
        bus: g.pci.bus,
        device: g.pci.device,
        pci_device_id: g.pci_device_id,
        pci_sub_system_id: 0,
        bus_id: [0; ffi::NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE],
    };
    fill_array(&mut info.bus_id_legacy, &g.pci.bus_id_legacy());
    fill_array(&mut info.bus_id, &g.pci.bus_id());
    info
}

/// PCI info (the parent's for a MIG handle).
///
/// # Safety
/// `pci` must be null or valid for a write of an `nvmlPciInfo_t`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v3(
    device: NvmlDevice,
    pci: *mut NvmlPciInfo,
) -> NvmlReturn {
    // SAFETY: forwarded caller contract.
    with_device(device, |_, d| unsafe { put(pci, pci_info(d)) })
}

/// Same layout and answer as [`nvmlDeviceGetPciInfo_v3`].
///
/// # Safety
/// `pci` must be null or valid for a write of an `nvmlPciInfo_t`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v2(
    device: NvmlDevice,
    pci: *mut NvmlPciInfo,
) -> NvmlReturn {
    // SAFETY: same contract.
    unsafe { nvmlDeviceGetPciInfo_v3(device, pci) }
}

/// The original v1 call with the old 52-byte struct (`busId` in the 4-digit-domain form).
///
/// # Safety
/// `pci` must be null or valid for a write of the v1 `nvmlPciInfo_t`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo(
    device: NvmlDevice,
    pci: *mut NvmlPciInfoV1,
) -> NvmlReturn {
    with_device(device, |_, d| {
        let v3 = pci_info(d);
        let v1 = NvmlPciInfoV1 {
            bus_id: v3.bus_id_legacy,
            domain: v3.domain,
            bus: v3.bus,
            device: v3.device,
            pci_device_id: v3.pci_device_id,
            pci_sub_system_id: v3.pci_sub_system_id,
            reserved: [0; 4],
        };
        // SAFETY: forwarded caller contract.
        unsafe { put(pci, v1) }
    })
}

/// Memory of the device (a MIG device's own slice); in use: what `telemetry.rs` scripts.
/// `GPU_IS_LOST` while the GPU is marked lost (see `events`).
///
/// # Safety
/// `memory` must be null or valid for a write of an `nvmlMemory_t`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo(
    device: NvmlDevice,
    memory: *mut NvmlMemory,
) -> NvmlReturn {
    with_device(device, |t, d| {
        // Scripted use (telemetry.rs); v1 counts the reserved memory as used.
        let (total, reserved, used, free) = crate::telemetry::memory(t, d)?;
        let used = used + reserved;
        // SAFETY: forwarded caller contract.
        unsafe { put(memory, NvmlMemory { total, free, used }) }
    })
}

/// v2 memory info; the caller must set `version` to `nvmlMemory_v2`.
///
/// # Safety
/// `memory` must be null or valid for reads and writes of an `nvmlMemory_v2_t`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(
    device: NvmlDevice,
    memory: *mut NvmlMemoryV2,
) -> NvmlReturn {
    with_device(device, |t, d| {
        if crate::events::is_lost(t, d.gpu()) {
            return Err(ffi::NVML_ERROR_GPU_IS_LOST);
        }
        let memory = nonnull(memory)?;
        // SAFETY: non-null and valid for reads per the contract; `version` is the first field.
        let version = unsafe { memory.cast::<c_uint>().read_unaligned() };
        if version != ffi::NVML_MEMORY_V2_VERSION {
            return Err(ffi::NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
        }
        let (total, reserved, used, free) = crate::telemetry::memory(t, d)?;
        let info = NvmlMemoryV2 {
            version,
            total,
            reserved,
            free,
            used,
        };
        // SAFETY: forwarded caller contract.
        unsafe { put(memory, info) }
    })
}

/// `nvmlBrandType_t` of the (parent) GPU.
///
/// # Safety
/// `brand` must be null or valid for a write of an `nvmlBrandType_t`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetBrand(device: NvmlDevice, brand: *mut c_uint) -> NvmlReturn {
    // SAFETY: forwarded caller contract.
    with_device(device, |_, d| unsafe { put(brand, d.gpu().brand) })
}

/// `nvmlDeviceArchitecture_t` of the (parent) GPU.
///
/// # Safety
/// `arch` must be null or valid for a write of an `nvmlDeviceArchitecture_t`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetArchitecture(
    device: NvmlDevice,
    arch: *mut c_uint,
) -> NvmlReturn {
    // SAFETY: forwarded caller contract.
    with_device(device, |_, d| unsafe { put(arch, d.gpu().arch) })
}

/// CUDA compute capability of the (parent) GPU.
///
/// # Safety
/// `major` and `minor` must be null or valid for a write of an `int`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCudaComputeCapability(
    device: NvmlDevice,
    major: *mut c_int,
    minor: *mut c_int,
) -> NvmlReturn {
    with_device(device, |_, d| {
        let (major, minor) = (nonnull(major)?, nonnull(minor)?);
        let (cc_major, cc_minor) = d.gpu().cc;
        // SAFETY: both checked non-null; valid for writes per the contract.
        unsafe {
            put(major, cc_major)?;
            put(minor, cc_minor)
        }
    })
}

/// Compute mode (the parent's for a MIG handle), as persisted under `gpuhook-sim-state/`.
///
/// # Safety
/// `mode` must be null or valid for a write of an `nvmlComputeMode_t`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeMode(
    device: NvmlDevice,
    mode: *mut c_uint,
) -> NvmlReturn {
    with_device(device, |t, d| {
        let mode = nonnull(mode)?;
        let current = state::compute_mode(t, d.gpu())?;
        // SAFETY: forwarded caller contract.
        unsafe { put(mode, current) }
    })
}

/// Sets and persists a GPU's compute mode; `NOT_SUPPORTED` on a MIG handle, `INVALID_ARGUMENT`
/// for a value outside `nvmlComputeMode_t`.
#[no_mangle]
pub extern "C" fn nvmlDeviceSetComputeMode(device: NvmlDevice, mode: c_uint) -> NvmlReturn {
    with_device(device, |t, d| {
        let gpu = d.whole_gpu()?;
        state::set_compute_mode(t, gpu, mode)
    })
}
