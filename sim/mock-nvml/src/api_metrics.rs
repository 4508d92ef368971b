//! Telemetry entry points: utilization, temperature, power and energy, clocks, PCIe replays,
//! encoder/decoder, clock event reasons and field values, answered from the scripted values of
//! [`crate::telemetry`]. They are whole-GPU queries: a MIG handle gets `NOT_SUPPORTED`, as
//! utilization does on a real MIG device. A lost GPU answers `GPU_IS_LOST`.

use std::os::raw::{c_int, c_uint, c_ulonglong};

use crate::api_device::with_device;
use crate::ffi::{self, NvmlDevice, NvmlReturn};
use crate::out::{nonnull, put};
use crate::table::{Dev, Table};
use crate::telemetry::{values, Values};

/// `nvmlUtilization_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct NvmlUtilization {
    pub gpu: c_uint,
    pub memory: c_uint,
}

/// `nvmlFieldValue_t`; `value` is the `nvmlValue_t` union as raw bits.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct NvmlFieldValue {
    pub field_id: c_uint,
    pub scope_id: c_uint,
    pub timestamp: i64,
    pub latency_usec: i64,
    pub value_type: c_uint,
    pub nvml_return: NvmlReturn,
    pub value: u64,
}

/// `NVML_VALUE_TYPE_UNSIGNED_LONG_LONG`.
const VALUE_TYPE_ULL: c_uint = 3;
/// `NVML_FI_MAX` of the R570 header: ids at or above it are unknown.
const FI_MAX: c_uint = 170;
/// NVLink field ids (`nvml.h`): CRC flit/data, replay, recovery totals, throughput data/raw.
const NVLINK_FIELDS: [c_uint; 8] = [38, 45, 52, 59, 138, 139, 140, 141];

fn gpu_values(
    device: NvmlDevice,
    f: impl FnOnce(&'static Table, Dev<'static>, Values) -> Result<(), NvmlReturn>,
) -> NvmlReturn {
    with_device(device, |t, d| {
        d.whole_gpu()?;
        let v = values(t, d)?;
        f(t, d, v)
    })
}

fn index(d: Dev<'_>) -> u64 {
    u64::from(d.gpu().index)
}

fn u32_of(v: u64) -> c_uint {
    c_uint::try_from(v).unwrap_or(c_uint::MAX)
}

/// # Safety
/// `util` must be null or valid for a write of an `nvmlUtilization_t`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUtilizationRates(
    device: NvmlDevice,
    util: *mut NvmlUtilization,
) -> NvmlReturn {
    gpu_values(device, |_, d, v| {
        // NVML has no utilization for a GPU in MIG mode (nor for its MIG devices).
        if d.gpu().mig_enabled {
            return Err(ffi::NVML_ERROR_NOT_SUPPORTED);
        }
        let u = NvmlUtilization {
            gpu: u32_of(v.uint("gpu_util", 0).min(100)),
            memory: u32_of(v.uint("mem_util", 0).min(100)),
        };
        // SAFETY: forwarded caller contract.
        unsafe { put(util, u) }
    })
}

/// Only `NVML_TEMPERATURE_GPU` (0) exists.
///
/// # Safety
/// `temp` must be null or valid for a write of an `unsigned int`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTemperature(
    device: NvmlDevice,
    sensor: c_uint,
    temp: *mut c_uint,
) -> NvmlReturn {
    gpu_values(device, |_, d, v| {
        if sensor != 0 {
            return Err(ffi::NVML_ERROR_INVALID_ARGUMENT);
        }
        // SAFETY: forwarded caller contract.
        unsafe { put(temp, u32_of(v.uint("temp", 30 + index(d)))) }
    })
}

/// Milliwatts.
///
/// # Safety
/// `power` must be null or valid for a write of an `unsigned int`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPowerUsage(
    device: NvmlDevice,
    power: *mut c_uint,
) -> NvmlReturn {
    gpu_values(device, |_, d, v| {
        let mw = v.uint("power_mw", 70_000 + 1000 * index(d));
        // SAFETY: forwarded caller contract.
        unsafe { put(power, u32_of(mw)) }
    })
}

/// Millijoules since the driver was loaded.
///
/// # Safety
/// `energy` must be null or valid for a write of an `unsigned long long`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTotalEnergyConsumption(
    device: NvmlDevice,
    energy: *mut c_ulonglong,
) -> NvmlReturn {
    gpu_values(device, |_, _, v| {
        // SAFETY: forwarded caller contract.
        unsafe { put(energy, v.uint("energy_mj", 1_000_000_000)) }
    })
}

/// `nvmlClockType_t`: GRAPHICS 0 and SM 1 share `sm_clock`, MEM 2, VIDEO 3 (`sm_clock`).
///
/// # Safety
/// `clock` must be null or valid for a write of an `unsigned int`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetClockInfo(
    device: NvmlDevice,
    kind: c_uint,
    clock: *mut c_uint,
) -> NvmlReturn {
    gpu_values(device, |_, _, v| {
        let mhz = match kind {
            0 | 1 | 3 => v.uint("sm_clock", 1410),
            2 => v.uint("mem_clock", 1593),
            _ => return Err(ffi::NVML_ERROR_INVALID_ARGUMENT),
        };
        // SAFETY: forwarded caller contract.
        unsafe { put(clock, u32_of(mhz)) }
    })
}

/// # Safety
/// `value` must be null or valid for a write of an `unsigned int`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPcieReplayCounter(
    device: NvmlDevice,
    value: *mut c_uint,
) -> NvmlReturn {
    gpu_values(device, |_, _, v| {
        // SAFETY: forwarded caller contract.
        unsafe { put(value, u32_of(v.uint("pcie_replay", 0))) }
    })
}

fn codec(
    key: &'static str,
    device: NvmlDevice,
    util: *mut c_uint,
    period: *mut c_uint,
) -> NvmlReturn {
    gpu_values(device, |_, _, v| {
        let (util, period) = (nonnull(util)?, nonnull(period)?);
        // SAFETY: both checked non-null; valid for writes per the callers' contract.
        unsafe {
            put(util, u32_of(v.uint(key, 0).min(100)))?;
            put(period, 167_000)
        }
    })
}

/// # Safety
/// `util` and `period_us` must be null or valid for a write of an `unsigned int`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetEncoderUtilization(
    device: NvmlDevice,
    util: *mut c_uint,
    period_us: *mut c_uint,
) -> NvmlReturn {
    codec("enc_util", device, util, period_us)
}

/// # Safety
/// `util` and `period_us` must be null or valid for a write of an `unsigned int`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetDecoderUtilization(
    device: NvmlDevice,
    util: *mut c_uint,
    period_us: *mut c_uint,
) -> NvmlReturn {
    codec("dec_util", device, util, period_us)
}

/// `nvmlClocksEventReason*` bits.
///
/// # Safety
/// `reasons` must be null or valid for a write of an `unsigned long long`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCurrentClocksEventReasons(
    device: NvmlDevice,
    reasons: *mut c_ulonglong,
) -> NvmlReturn {
    gpu_values(device, |_, _, v| {
        // SAFETY: forwarded caller contract.
        unsafe { put(reasons, v.uint("throttle", 0)) }
    })
}

/// The pre-R535 name of [`nvmlDeviceGetCurrentClocksEventReasons`].
///
/// # Safety
/// As [`nvmlDeviceGetCurrentClocksEventReasons`].
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCurrentClocksThrottleReasons(
    device: NvmlDevice,
    reasons: *mut c_ulonglong,
) -> NvmlReturn {
    // SAFETY: same contract.
    unsafe { nvmlDeviceGetCurrentClocksEventReasons(device, reasons) }
}

fn field_value(t: &Table, d: Dev<'_>, v: &Values, id: c_uint) -> Result<u64, NvmlReturn> {
    if id == 0 || id >= FI_MAX {
        return Err(ffi::NVML_ERROR_INVALID_ARGUMENT);
    }
    if NVLINK_FIELDS.contains(&id) && d.gpu().nvlinks == 0 {
        return Err(ffi::NVML_ERROR_NOT_SUPPORTED);
    }
    let _ = t;
    Ok(match id {
        82 => v.uint("memory_temp", 40),
        83 => v.uint("energy_mj", 1_000_000_000),
        94 => v.uint("pcie_replay", 0),
        _ => v.uint(&format!("field.{id}"), 0),
    })
}

/// Fills each entry's value and per-field return code (`fieldId` set by the caller).
///
/// # Safety
/// `values` must be null or valid for reads and writes of `count` `nvmlFieldValue_t`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetFieldValues(
    device: NvmlDevice,
    count: c_int,
    values_out: *mut NvmlFieldValue,
) -> NvmlReturn {
    gpu_values(device, |t, d, v| {
        let out = nonnull(values_out)?;
        let n = usize::try_from(count).map_err(|_| ffi::NVML_ERROR_INVALID_ARGUMENT)?;
        for i in 0..n {
            // SAFETY: i < count entries, valid for reads and writes per the contract.
            let slot = unsafe { out.add(i) };
            // SAFETY: as above.
            let mut fv = unsafe { slot.read_unaligned() };
            let (rc, value) = match field_value(t, d, &v, fv.field_id) {
                Ok(value) => (ffi::NVML_SUCCESS, value),
                Err(rc) => (rc, 0),
            };
            fv.nvml_return = rc;
            fv.value_type = VALUE_TYPE_ULL;
            fv.value = value;
            // SAFETY: as above.
            unsafe { slot.write_unaligned(fv) };
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn layouts_match_nvml_h() {
        assert_eq!(size_of::<NvmlUtilization>(), 8);
        assert_eq!(size_of::<NvmlFieldValue>(), 40);
        assert_eq!(offset_of!(NvmlFieldValue, value_type), 24);
        assert_eq!(offset_of!(NvmlFieldValue, value), 32);
    }
}
