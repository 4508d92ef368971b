//! Event entry points: `nvmlEventSetCreate`, `nvmlDeviceGetSupportedEventTypes`,
//! `nvmlDeviceRegisterEvents`, `nvmlEventSetWait_v2`, `nvmlEventSetFree` (see [`crate::events`]
//! for where the events come from).
//!
//! As on a real driver, events are registered on full GPUs: a MIG handle is `NOT_SUPPORTED`, and
//! an Xid of a MIG device arrives on its parent with the device's GI/CI ids.

use std::os::raw::{c_uint, c_ulonglong};

use crate::api_device::with_device;
use crate::events;
use crate::ffi::{self, NvmlDevice, NvmlEventData, NvmlEventSet, NvmlReturn};
use crate::out::{guard, nonnull, put};
use crate::state;

/// What every simulated GPU can report.
const SUPPORTED: u64 = ffi::EVENT_SINGLE_BIT_ECC
    | ffi::EVENT_DOUBLE_BIT_ECC
    | ffi::EVENT_PSTATE
    | ffi::EVENT_XID_CRITICAL;

/// Creates an empty event set.
///
/// # Safety
/// `set` must be null or valid for a write of an `nvmlEventSet_t`.
#[no_mangle]
pub unsafe extern "C" fn nvmlEventSetCreate(set: *mut NvmlEventSet) -> NvmlReturn {
    guard(|| {
        let set = nonnull(set)?;
        let table = state::table()?;
        // SAFETY: forwarded caller contract.
        unsafe { put(set, events::create(table)) }
    })
}

/// Frees an event set; a handle this library never made is `INVALID_ARGUMENT`.
#[no_mangle]
pub extern "C" fn nvmlEventSetFree(set: NvmlEventSet) -> NvmlReturn {
    guard(|| {
        state::table()?;
        events::free(set)
    })
}

/// The event bits a GPU can report; `NOT_SUPPORTED` on a MIG handle.
///
/// # Safety
/// `event_types` must be null or valid for a write of an `unsigned long long`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetSupportedEventTypes(
    device: NvmlDevice,
    event_types: *mut c_ulonglong,
) -> NvmlReturn {
    with_device(device, |_, d| {
        d.whole_gpu()?;
        // SAFETY: forwarded caller contract.
        unsafe { put(event_types, SUPPORTED) }
    })
}

/// Registers a GPU for `event_types` in `set`; unsupported bits are `NOT_SUPPORTED`.
#[no_mangle]
pub extern "C" fn nvmlDeviceRegisterEvents(
    device: NvmlDevice,
    event_types: c_ulonglong,
    set: NvmlEventSet,
) -> NvmlReturn {
    with_device(device, |_, d| {
        let gpu = d.whole_gpu()?;
        let set = events::resolve(set)?;
        if event_types & !SUPPORTED != 0 {
            return Err(ffi::NVML_ERROR_NOT_SUPPORTED);
        }
        set.register(gpu.index, event_types);
        Ok(())
    })
}

/// Waits up to `timeoutms` for an event of the set; `NVML_ERROR_TIMEOUT` when none came.
///
/// # Safety
/// `data` must be null or valid for a write of an `nvmlEventData_t`.
#[no_mangle]
pub unsafe extern "C" fn nvmlEventSetWait_v2(
    set: NvmlEventSet,
    data: *mut NvmlEventData,
    timeoutms: c_uint,
) -> NvmlReturn {
    guard(|| {
        let data = nonnull(data)?;
        let table = state::table()?;
        let set = events::resolve(set)?;
        let event = set.wait(table, timeoutms)?;
        // SAFETY: forwarded caller contract.
        unsafe { put(data, event) }
    })
}
