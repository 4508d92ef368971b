//! The telemetry slice of NVML's C ABI (what `gpuhook-exporter` samples), resolved once with the
//! rest of [`super::ffi::Fns`]. Every entry point is optional: a driver that lacks one makes that
//! field absent, never the library unusable.
//!
//! Signatures and layouts follow `nvml.h` (R535+: `nvmlFieldValue_t`, `nvmlProcessInfo_t` as
//! taken by the `_v3` process queries, `nvmlProcessUtilizationSample_t`, `nvmlUtilization_t`);
//! the layout tests at the bottom pin their sizes and offsets.

use std::os::raw::{c_int, c_uint, c_ulonglong, c_void};

/// `nvmlReturn_t` and `nvmlDevice_t`, as in `ffi.rs` (kept apart so this table does not import it).
pub type NvmlReturn = c_uint;
pub type NvmlDevice = *mut c_void;

/// `nvmlMemory_t` (v1).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Memory {
    pub total: c_ulonglong,
    pub free: c_ulonglong,
    pub used: c_ulonglong,
}

/// `nvmlUtilization_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Utilization {
    pub gpu: c_uint,
    pub memory: c_uint,
}

/// `nvmlMemory_v2_t`; `version` must be [`MEMORY_V2_VERSION`].
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct MemoryV2 {
    pub version: c_uint,
    pub total: c_ulonglong,
    pub reserved: c_ulonglong,
    pub free: c_ulonglong,
    pub used: c_ulonglong,
}

/// `NVML_STRUCT_VERSION(Memory, 2)`: `sizeof(nvmlMemory_v2_t) | 2 << 24`.
pub const MEMORY_V2_VERSION: c_uint = 40 | (2 << 24);

/// `nvmlFieldValue_t` (40 bytes); `value` is the `nvmlValue_t` union as raw bits.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct FieldValue {
    pub field_id: c_uint,
    pub scope_id: c_uint,
    pub timestamp: i64,
    pub latency_usec: i64,
    pub value_type: c_uint,
    pub nvml_return: NvmlReturn,
    pub value: u64,
}

/// `nvmlProcessInfo_t` as the `_v3` running-process queries fill it (24 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessInfo {
    pub pid: c_uint,
    pub used_gpu_memory: c_ulonglong,
    pub gpu_instance_id: c_uint,
    pub compute_instance_id: c_uint,
}

/// `nvmlProcessUtilizationSample_t` (32 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessUtilizationSample {
    pub pid: c_uint,
    pub time_stamp: c_ulonglong,
    pub sm_util: c_uint,
    pub mem_util: c_uint,
    pub enc_util: c_uint,
    pub dec_util: c_uint,
}

type FnDevUtil = unsafe extern "C" fn(NvmlDevice, *mut Utilization) -> NvmlReturn;
type FnDevMemV2 = unsafe extern "C" fn(NvmlDevice, *mut MemoryV2) -> NvmlReturn;
type FnDevMem = unsafe extern "C" fn(NvmlDevice, *mut Memory) -> NvmlReturn;
type FnDevEnumUint = unsafe extern "C" fn(NvmlDevice, c_uint, *mut c_uint) -> NvmlReturn;
type FnDevUint = unsafe extern "C" fn(NvmlDevice, *mut c_uint) -> NvmlReturn;
type FnDevU64 = unsafe extern "C" fn(NvmlDevice, *mut c_ulonglong) -> NvmlReturn;
type FnDevTwoUint = unsafe extern "C" fn(NvmlDevice, *mut c_uint, *mut c_uint) -> NvmlReturn;
type FnDevFields = unsafe extern "C" fn(NvmlDevice, c_int, *mut FieldValue) -> NvmlReturn;
type FnDevProcs = unsafe extern "C" fn(NvmlDevice, *mut c_uint, *mut ProcessInfo) -> NvmlReturn;
type FnDevProcUtil = unsafe extern "C" fn(
    NvmlDevice,
    *mut ProcessUtilizationSample,
    *mut c_uint,
    c_ulonglong,
) -> NvmlReturn;

/// Telemetry entry points (all optional).
#[derive(Debug, Clone, Copy)]
pub struct MetricFns {
    pub utilization_rates: Option<FnDevUtil>,
    pub memory_info_v2: Option<FnDevMemV2>,
    pub memory_info: Option<FnDevMem>,
    pub temperature: Option<FnDevEnumUint>,
    pub power_usage: Option<FnDevUint>,
    pub total_energy: Option<FnDevU64>,
    pub clock_info: Option<FnDevEnumUint>,
    pub pcie_replay: Option<FnDevUint>,
    pub encoder_utilization: Option<FnDevTwoUint>,
    pub decoder_utilization: Option<FnDevTwoUint>,
    pub clocks_event_reasons: Option<FnDevU64>,
    pub clocks_throttle_reasons: Option<FnDevU64>,
    pub field_values: Option<FnDevFields>,
    pub compute_processes_v3: Option<FnDevProcs>,
    pub graphics_processes_v3: Option<FnDevProcs>,
    pub mps_processes_v3: Option<FnDevProcs>,
    pub process_utilization: Option<FnDevProcUtil>,
}

impl MetricFns {
    /// Resolves what the library exports.
    pub fn load(lib: &libloading::Library) -> MetricFns {
        macro_rules! opt {
            ($name:literal) => {
                // SAFETY: the field's type is the C signature of `$name` from nvml.h.
                unsafe { lib.get(concat!($name, "\0").as_bytes()).ok().map(|s| *s) }
            };
        }
        MetricFns {
            utilization_rates: opt!("nvmlDeviceGetUtilizationRates"),
            memory_info_v2: opt!("nvmlDeviceGetMemoryInfo_v2"),
            memory_info: opt!("nvmlDeviceGetMemoryInfo"),
            temperature: opt!("nvmlDeviceGetTemperature"),
            power_usage: opt!("nvmlDeviceGetPowerUsage"),
            total_energy: opt!("nvmlDeviceGetTotalEnergyConsumption"),
            clock_info: opt!("nvmlDeviceGetClockInfo"),
            pcie_replay: opt!("nvmlDeviceGetPcieReplayCounter"),
            encoder_utilization: opt!("nvmlDeviceGetEncoderUtilization"),
            decoder_utilization: opt!("nvmlDeviceGetDecoderUtilization"),
            clocks_event_reasons: opt!("nvmlDeviceGetCurrentClocksEventReasons"),
            clocks_throttle_reasons: opt!("nvmlDeviceGetCurrentClocksThrottleReasons"),
            field_values: opt!("nvmlDeviceGetFieldValues"),
            compute_processes_v3: opt!("nvmlDeviceGetComputeRunningProcesses_v3"),
            graphics_processes_v3: opt!("nvmlDeviceGetGraphicsRunningProcesses_v3"),
            mps_processes_v3: opt!("nvmlDeviceGetMPSComputeRunningProcesses_v3"),
            process_utilization: opt!("nvmlDeviceGetProcessUtilization"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    /// `nvml.h` layouts on LP64.
    #[test]
    fn layouts_match_nvml_h() {
        assert_eq!(size_of::<Utilization>(), 8);
        assert_eq!(size_of::<MemoryV2>(), 40);
        assert_eq!(MEMORY_V2_VERSION, 0x0200_0028);
        assert_eq!(size_of::<FieldValue>(), 40);
        assert_eq!(offset_of!(FieldValue, timestamp), 8);
        assert_eq!(offset_of!(FieldValue, value_type), 24);
        assert_eq!(offset_of!(FieldValue, nvml_return), 28);
        assert_eq!(offset_of!(FieldValue, value), 32);
        assert_eq!(size_of::<ProcessInfo>(), 24);
        assert_eq!(offset_of!(ProcessInfo, used_gpu_memory), 8);
        assert_eq!(offset_of!(ProcessInfo, gpu_instance_id), 16);
        assert_eq!(size_of::<ProcessUtilizationSample>(), 32);
        assert_eq!(offset_of!(ProcessUtilizationSample, time_stamp), 8);
        assert_eq!(offset_of!(ProcessUtilizationSample, sm_util), 16);
    }
}
