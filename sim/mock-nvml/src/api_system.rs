//! Library lifecycle, system queries and device enumeration/lookup entry points.
//!
//! Versioned names (`_v2`) are what consumers built against a current `nvml.h` call; the
//! unversioned ones are kept for old binaries. Both behave identically here.

use std::os::raw::{c_char, c_int, c_uint};

use crate::ffi::{self, NvmlDevice, NvmlReturn};
use crate::out::{guard, input_str, put, put_str};
use crate::pci;
use crate::state;
use crate::table::handle_of;

/// Initialises NVML (reference counted).
#[no_mangle]
pub extern "C" fn nvmlInit_v2() -> NvmlReturn {
    guard(|| match state::init() {
        ffi::NVML_SUCCESS => Ok(()),
        code => Err(code),
    })
}

/// Legacy `nvmlInit` (v1).
#[no_mangle]
pub extern "C" fn nvmlInit() -> NvmlReturn {
    nvmlInit_v2()
}

/// `nvmlInitWithFlags`: the flags (`NVML_INIT_FLAG_NO_GPUS` = 1, `NO_ATTACH` = 2) only relax
/// failures a simulated node never has, so they are accepted and ignored.
#[no_mangle]
pub extern "C" fn nvmlInitWithFlags(_flags: c_uint) -> NvmlReturn {
    nvmlInit_v2()
}

/// Matches one successful init.
#[no_mangle]
pub extern "C" fn nvmlShutdown() -> NvmlReturn {
    guard(|| match state::shutdown() {
        ffi::NVML_SUCCESS => Ok(()),
        code => Err(code),
    })
}

/// Static description of a return code; never null, valid forever.
#[no_mangle]
pub extern "C" fn nvmlErrorString(result: NvmlReturn) -> *const c_char {
    ffi::error_string(result).as_ptr().cast()
}

/// Driver version string, e.g. `570.158.01`.
///
/// # Safety
/// `version` must be null or valid for writes of `length` bytes.
#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(
    version: *mut c_char,
    length: c_uint,
) -> NvmlReturn {
    guard(|| {
        let t = state::table()?;
        // SAFETY: forwarded caller contract.
        unsafe { put_str(version, length, &t.driver_version) }
    })
}

/// NVML version string, `<cuda major>.<driver version>`.
///
/// # Safety
/// `version` must be null or valid for writes of `length` bytes.
#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetNVMLVersion(
    version: *mut c_char,
    length: c_uint,
) -> NvmlReturn {
    guard(|| {
        let t = state::table()?;
        // SAFETY: forwarded caller contract.
        unsafe { put_str(version, length, &t.nvml_version) }
    })
}

/// CUDA driver version as `1000 * major + 10 * minor`.
///
/// # Safety
/// `cuda_driver_version` must be null or valid for a write of an `int`.
#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion_v2(
    cuda_driver_version: *mut c_int,
) -> NvmlReturn {
    guard(|| {
        let t = state::table()?;
        // SAFETY: forwarded caller contract.
        unsafe { put(cuda_driver_version, t.cuda_version) }
    })
}

/// Same as [`nvmlSystemGetCudaDriverVersion_v2`].
///
/// # Safety
/// `cuda_driver_version` must be null or valid for a write of an `int`.
#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion(
    cuda_driver_version: *mut c_int,
) -> NvmlReturn {
    // SAFETY: same contract.
    unsafe { nvmlSystemGetCudaDriverVersion_v2(cuda_driver_version) }
}

/// Number of GPUs (MIG devices are not counted).
///
/// # Safety
/// `device_count` must be null or valid for a write of an `unsigned int`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(device_count: *mut c_uint) -> NvmlReturn {
    guard(|| {
        let t = state::table()?;
        let count = c_uint::try_from(t.gpus.len()).map_err(|_| ffi::NVML_ERROR_UNKNOWN)?;
        // SAFETY: forwarded caller contract.
        unsafe { put(device_count, count) }
    })
}

/// Legacy `nvmlDeviceGetCount`.
///
/// # Safety
/// `device_count` must be null or valid for a write of an `unsigned int`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount(device_count: *mut c_uint) -> NvmlReturn {
    // SAFETY: same contract.
    unsafe { nvmlDeviceGetCount_v2(device_count) }
}

/// Handle of GPU `index` (NVML order); `INVALID_ARGUMENT` when `index >= count`.
///
/// # Safety
/// `device` must be null or valid for a write of an `nvmlDevice_t`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(
    index: c_uint,
    device: *mut NvmlDevice,
) -> NvmlReturn {
    guard(|| {
        let t = state::table()?;
        let gpu = t
            .gpus
            .get(index as usize)
            .ok_or(ffi::NVML_ERROR_INVALID_ARGUMENT)?;
        // SAFETY: forwarded caller contract.
        unsafe { put(device, handle_of(gpu)) }
    })
}

/// Legacy `nvmlDeviceGetHandleByIndex`.
///
/// # Safety
/// `device` must be null or valid for a write of an `nvmlDevice_t`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex(
    index: c_uint,
    device: *mut NvmlDevice,
) -> NvmlReturn {
    // SAFETY: same contract.
    unsafe { nvmlDeviceGetHandleByIndex_v2(index, device) }
}

/// Handle of the GPU or MIG device with this exact UUID; `NOT_FOUND` otherwise.
///
/// # Safety
/// `uuid` must be null or NUL-terminated; `device` null or valid for a write of an `nvmlDevice_t`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByUUID(
    uuid: *const c_char,
    device: *mut NvmlDevice,
) -> NvmlReturn {
    guard(|| {
        let t = state::table()?;
        // SAFETY: forwarded caller contract.
        let uuid = unsafe { input_str(uuid) }?;
        crate::out::nonnull(device)?;
        let found = uuid
            .and_then(|u| t.by_uuid(u))
            .ok_or(ffi::NVML_ERROR_NOT_FOUND)?;
        // SAFETY: forwarded caller contract.
        unsafe { put(device, found) }
    })
}

/// Handle of the GPU at a PCI bus id (4- or 8-digit domain, any case); `NOT_FOUND` otherwise.
///
/// # Safety
/// `pci_bus_id` must be null or NUL-terminated; `device` null or valid for a write of an
/// `nvmlDevice_t`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByPciBusId_v2(
    pci_bus_id: *const c_char,
    device: *mut NvmlDevice,
) -> NvmlReturn {
    guard(|| {
        let t = state::table()?;
        // SAFETY: forwarded caller contract.
        let id = unsafe { input_str(pci_bus_id) }?;
        crate::out::nonnull(device)?;
        let addr = id
            .and_then(|s| pci::parse_bus_id(s).ok())
            .ok_or(ffi::NVML_ERROR_INVALID_ARGUMENT)?;
        let gpu = t
            .gpus
            .iter()
            .find(|g| g.pci == addr)
            .ok_or(ffi::NVML_ERROR_NOT_FOUND)?;
        // SAFETY: forwarded caller contract.
        unsafe { put(device, handle_of(gpu)) }
    })
}

/// Legacy `nvmlDeviceGetHandleByPciBusId`.
///
/// # Safety
/// As [`nvmlDeviceGetHandleByPciBusId_v2`].
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByPciBusId(
    pci_bus_id: *const c_char,
    device: *mut NvmlDevice,
) -> NvmlReturn {
    // SAFETY: same contract.
    unsafe { nvmlDeviceGetHandleByPciBusId_v2(pci_bus_id, device) }
}
