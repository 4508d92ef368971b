//! MIG entry points.
//!
//! Return codes follow `nvml.h`: MIG queries on a GPU model without MIG are `NOT_SUPPORTED`
//! (T4, L20); a MIG-capable GPU with MIG off reports mode 0 and a maximum of 0 MIG devices; MIG
//! device indexes run `0..max` where `index >= max` is `INVALID_ARGUMENT` and an index with no
//! MIG device behind it is `NOT_FOUND` (consumers loop to the maximum and skip those).

use std::os::raw::c_uint;

use crate::api_device::with_device;
use crate::ffi::{self, NvmlDevice, NvmlReturn};
use crate::out::{nonnull, put};
use crate::table::{handle_of, Mig};

/// Current and pending MIG mode (`NVML_DEVICE_MIG_ENABLE`/`DISABLE`; pending differs while a
/// mode change waits for a reset, see `mig_overlay`).
///
/// # Safety
/// `current_mode` and `pending_mode` must be null or valid for a write of an `unsigned int`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMigMode(
    device: NvmlDevice,
    current_mode: *mut c_uint,
    pending_mode: *mut c_uint,
) -> NvmlReturn {
    with_device(device, |_, d| {
        let (current_mode, pending_mode) = (nonnull(current_mode)?, nonnull(pending_mode)?);
        let gpu = d.whole_gpu()?;
        if !gpu.mig_capable {
            return Err(ffi::NVML_ERROR_NOT_SUPPORTED);
        }
        let raw = |on: bool| {
            if on {
                ffi::NVML_DEVICE_MIG_ENABLE
            } else {
                ffi::NVML_DEVICE_MIG_DISABLE
            }
        };
        let mode = raw(gpu.mig_enabled);
        let pending = gpu.mig_pending.map_or(mode, raw);
        // SAFETY: both checked non-null; valid for writes per the contract.
        unsafe {
            put(current_mode, mode)?;
            put(pending_mode, pending)
        }
    })
}

/// Maximum number of MIG devices; 0 when MIG is off or unsupported.
///
/// # Safety
/// `count` must be null or valid for a write of an `unsigned int`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMaxMigDeviceCount(
    device: NvmlDevice,
    count: *mut c_uint,
) -> NvmlReturn {
    with_device(device, |_, d| {
        let gpu = d.whole_gpu()?;
        let max = if gpu.mig_enabled { gpu.max_mig } else { 0 };
        // SAFETY: forwarded caller contract.
        unsafe { put(count, max) }
    })
}

/// Handle of MIG device `index` of a GPU.
///
/// # Safety
/// `mig_device` must be null or valid for a write of an `nvmlDevice_t`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMigDeviceHandleByIndex(
    device: NvmlDevice,
    index: c_uint,
    mig_device: *mut NvmlDevice,
) -> NvmlReturn {
    with_device(device, |_, d| {
        let mig_device = nonnull(mig_device)?;
        let gpu = d
            .whole_gpu()
            .map_err(|_| ffi::NVML_ERROR_INVALID_ARGUMENT)?;
        if !gpu.mig_enabled {
            return Err(ffi::NVML_ERROR_NOT_SUPPORTED);
        }
        if index >= gpu.max_mig {
            return Err(ffi::NVML_ERROR_INVALID_ARGUMENT);
        }
        let mig = gpu
            .migs
            .get(index as usize)
            .ok_or(ffi::NVML_ERROR_NOT_FOUND)?;
        // SAFETY: forwarded caller contract.
        unsafe { put(mig_device, handle_of(mig)) }
    })
}

/// 1 for a MIG device handle, 0 for a GPU.
///
/// # Safety
/// `is_mig_device` must be null or valid for a write of an `unsigned int`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceIsMigDeviceHandle(
    device: NvmlDevice,
    is_mig_device: *mut c_uint,
) -> NvmlReturn {
    // SAFETY: forwarded caller contract.
    with_device(device, |_, d| unsafe {
        put(is_mig_device, c_uint::from(d.mig().is_ok()))
    })
}

/// GPU instance id of a MIG device; `NOT_SUPPORTED` for a GPU.
///
/// # Safety
/// `id` must be null or valid for a write of an `unsigned int`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceId(
    device: NvmlDevice,
    id: *mut c_uint,
) -> NvmlReturn {
    // SAFETY: forwarded caller contract.
    unsafe { put_mig_id(device, id, |mig| mig.gi) }
}

/// Compute instance id of a MIG device; `NOT_SUPPORTED` for a GPU.
///
/// # Safety
/// `id` must be null or valid for a write of an `unsigned int`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeInstanceId(
    device: NvmlDevice,
    id: *mut c_uint,
) -> NvmlReturn {
    // SAFETY: forwarded caller contract.
    unsafe { put_mig_id(device, id, |mig| mig.ci) }
}

/// Writes one id of the MIG device behind `device` (`field` picks it) to `id`; `NOT_SUPPORTED`
/// for a GPU.
///
/// # Safety
/// `id` must be null or valid for a write of an `unsigned int`.
unsafe fn put_mig_id(device: NvmlDevice, id: *mut c_uint, field: fn(&Mig) -> c_uint) -> NvmlReturn {
    with_device(device, |_, d| {
        let id = nonnull(id)?;
        let (_, mig) = d.mig()?;
        // SAFETY: non-null; valid for a write per this function's contract.
        unsafe { put(id, field(mig)) }
    })
}

/// Parent GPU of a MIG device; `INVALID_ARGUMENT` when `mig_device` is not a MIG handle.
///
/// # Safety
/// `device` must be null or valid for a write of an `nvmlDevice_t`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetDeviceHandleFromMigDeviceHandle(
    mig_device: NvmlDevice,
    device: *mut NvmlDevice,
) -> NvmlReturn {
    with_device(mig_device, |_, d| {
        let device = nonnull(device)?;
        let (gpu, _) = d.mig().map_err(|_| ffi::NVML_ERROR_INVALID_ARGUMENT)?;
        // SAFETY: forwarded caller contract.
        unsafe { put(device, handle_of(gpu)) }
    })
}
