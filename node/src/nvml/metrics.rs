//! Telemetry queries of a device (the GPU exporter's samples): utilization, memory, temperature,
//! power and energy, clocks, PCIe replays, encoder/decoder, clock event reasons, NVML field
//! values, and the processes using the device with their memory and utilization samples.
//!
//! Every call returns the NVML code on failure (in [`NodeError::Nvml`]), so callers can tell
//! `NOT_SUPPORTED` (the field is absent on this device) from `GPU_IS_LOST`.

use std::os::raw::{c_int, c_uint};

use super::metrics_ffi::{self as mf, MetricFns};
use super::{ffi, Device};
use crate::error::NodeError;

/// `nvmlClockType_t`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Clock {
    Graphics = 0,
    Sm = 1,
    Mem = 2,
    Video = 3,
}

/// Memory of a device in bytes (`nvmlMemory_v2_t`; `reserved` is 0 from the v1 fallback).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemoryInfo {
    pub total: u64,
    pub reserved: u64,
    pub free: u64,
    pub used: u64,
}

/// One `nvmlFieldValue_t` answer, by its NVML value type.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FieldSample {
    F64(f64),
    U64(u64),
    I64(i64),
}

impl FieldSample {
    /// The value as a float (what Prometheus carries).
    pub fn as_f64(self) -> f64 {
        match self {
            FieldSample::F64(v) => v,
            #[allow(clippy::cast_precision_loss)]
            FieldSample::U64(v) => v as f64,
            #[allow(clippy::cast_precision_loss)]
            FieldSample::I64(v) => v as f64,
        }
    }
}

/// Which running-process list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProcessKind {
    Compute,
    Graphics,
    /// MPS clients (`nvmlDeviceGetMPSComputeRunningProcesses_v3`).
    Mps,
}

/// A process with a context on the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessUse {
    pub pid: u32,
    /// Bytes; `None` when NVML cannot tell (`NVML_VALUE_NOT_AVAILABLE`, e.g. Windows WDDM).
    pub used_bytes: Option<u64>,
    pub kind: ProcessKind,
}

/// One `nvmlProcessUtilizationSample_t`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessSample {
    pub pid: u32,
    /// CPU time stamp of the sample (µs).
    pub timestamp_us: u64,
    pub sm: u32,
    pub mem: u32,
    pub enc: u32,
    pub dec: u32,
}

/// `NVML_VALUE_NOT_AVAILABLE` for `unsigned long long` fields.
const VALUE_NOT_AVAILABLE: u64 = u64::MAX;
/// Largest process list accepted (a GPU has far fewer contexts).
const MAX_PROCESSES: u32 = 4096;

impl Device<'_> {
    fn fns(&self) -> &MetricFns {
        &self.nvml.fns.metrics
    }

    fn chk(&self, rc: ffi::NvmlReturn, call: &'static str) -> Result<(), NodeError> {
        self.nvml.check(rc, call, Some(&self.label))
    }

    fn uint_of(
        &self,
        f: Option<unsafe extern "C" fn(ffi::NvmlDevice, *mut c_uint) -> ffi::NvmlReturn>,
        call: &'static str,
    ) -> Result<u32, NodeError> {
        let f = self.need(f, call)?;
        let mut v = 0;
        // SAFETY: handle came from NVML and v is a valid out-pointer.
        let rc = unsafe { f(self.handle, &mut v) };
        self.chk(rc, call)?;
        Ok(v)
    }

    fn need<T>(&self, f: Option<T>, call: &'static str) -> Result<T, NodeError> {
        f.ok_or_else(|| self.nvml.missing(call))
    }

    /// `nvmlDeviceGetUtilizationRates`: `(gpu %, memory %)`.
    pub fn utilization_rates(&self) -> Result<(u32, u32), NodeError> {
        let call = "nvmlDeviceGetUtilizationRates";
        let f = self.need(self.fns().utilization_rates, call)?;
        let mut u = mf::Utilization::default();
        // SAFETY: handle came from NVML; u is a valid nvmlUtilization_t.
        let rc = unsafe { f(self.handle, &mut u) };
        self.chk(rc, call)?;
        Ok((u.gpu, u.memory))
    }

    /// `nvmlDeviceGetMemoryInfo_v2`, else v1 (with `reserved` 0).
    pub fn memory_info(&self) -> Result<MemoryInfo, NodeError> {
        if let Some(f) = self.fns().memory_info_v2 {
            let mut m = mf::MemoryV2 {
                version: mf::MEMORY_V2_VERSION,
                ..Default::default()
            };
            // SAFETY: m is a valid nvmlMemory_v2_t with its version set.
            let rc = unsafe { f(self.handle, &mut m) };
            self.chk(rc, "nvmlDeviceGetMemoryInfo_v2")?;
            return Ok(MemoryInfo {
                total: m.total,
                reserved: m.reserved,
                free: m.free,
                used: m.used,
            });
        }
        let call = "nvmlDeviceGetMemoryInfo";
        let f = self.need(self.fns().memory_info, call)?;
        let mut m = mf::Memory::default();
        // SAFETY: m is a valid nvmlMemory_t.
        let rc = unsafe { f(self.handle, &mut m) };
        self.chk(rc, call)?;
        Ok(MemoryInfo {
            total: m.total,
            reserved: 0,
            free: m.free,
            used: m.used,
        })
    }

    fn enum_uint(
        &self,
        f: Option<unsafe extern "C" fn(ffi::NvmlDevice, c_uint, *mut c_uint) -> ffi::NvmlReturn>,
        which: c_uint,
        call: &'static str,
    ) -> Result<u32, NodeError> {
        let f = self.need(f, call)?;
        let mut v = 0;
        // SAFETY: handle came from NVML and v is a valid out-pointer.
        let rc = unsafe { f(self.handle, which, &mut v) };
        self.chk(rc, call)?;
        Ok(v)
    }

    fn u64_of(
        &self,
        f: Option<unsafe extern "C" fn(ffi::NvmlDevice, *mut u64) -> ffi::NvmlReturn>,
        call: &'static str,
    ) -> Result<u64, NodeError> {
        let f = self.need(f, call)?;
        let mut v = 0;
        // SAFETY: handle came from NVML and v is a valid out-pointer.
        let rc = unsafe { f(self.handle, &mut v) };
        self.chk(rc, call)?;
        Ok(v)
    }

    /// `nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)`, °C.
    pub fn temperature_gpu(&self) -> Result<u32, NodeError> {
        self.enum_uint(self.fns().temperature, 0, "nvmlDeviceGetTemperature")
    }

    /// `nvmlDeviceGetClockInfo`, MHz.
    pub fn clock_mhz(&self, clock: Clock) -> Result<u32, NodeError> {
        self.enum_uint(
            self.fns().clock_info,
            clock as c_uint,
            "nvmlDeviceGetClockInfo",
        )
    }

    /// `nvmlDeviceGetPowerUsage`, mW.
    pub fn power_usage_mw(&self) -> Result<u32, NodeError> {
        self.uint_of(self.fns().power_usage, "nvmlDeviceGetPowerUsage")
    }

    /// `nvmlDeviceGetTotalEnergyConsumption`, mJ since the driver was loaded.
    pub fn total_energy_mj(&self) -> Result<u64, NodeError> {
        self.u64_of(
            self.fns().total_energy,
            "nvmlDeviceGetTotalEnergyConsumption",
        )
    }

    /// `nvmlDeviceGetPcieReplayCounter`.
    pub fn pcie_replay_counter(&self) -> Result<u32, NodeError> {
        self.uint_of(self.fns().pcie_replay, "nvmlDeviceGetPcieReplayCounter")
    }

    fn codec(
        &self,
        f: Option<
            unsafe extern "C" fn(ffi::NvmlDevice, *mut c_uint, *mut c_uint) -> ffi::NvmlReturn,
        >,
        call: &'static str,
    ) -> Result<u32, NodeError> {
        let f = self.need(f, call)?;
        let (mut util, mut period) = (0, 0);
        // SAFETY: both are valid out-pointers.
        let rc = unsafe { f(self.handle, &mut util, &mut period) };
        self.chk(rc, call)?;
        Ok(util)
    }

    /// `nvmlDeviceGetEncoderUtilization`, %.
    pub fn encoder_utilization(&self) -> Result<u32, NodeError> {
        self.codec(
            self.fns().encoder_utilization,
            "nvmlDeviceGetEncoderUtilization",
        )
    }

    /// `nvmlDeviceGetDecoderUtilization`, %.
    pub fn decoder_utilization(&self) -> Result<u32, NodeError> {
        self.codec(
            self.fns().decoder_utilization,
            "nvmlDeviceGetDecoderUtilization",
        )
    }

    /// `nvmlDeviceGetCurrentClocksEventReasons` (older drivers: `...ThrottleReasons`), a bitmask.
    pub fn clocks_event_reasons(&self) -> Result<u64, NodeError> {
        match self.fns().clocks_event_reasons {
            Some(f) => self.u64_of(Some(f), "nvmlDeviceGetCurrentClocksEventReasons"),
            None => self.u64_of(
                self.fns().clocks_throttle_reasons,
                "nvmlDeviceGetCurrentClocksThrottleReasons",
            ),
        }
    }

    /// `nvmlDeviceGetFieldValues` for `ids`: one answer per id, `Err(code)` for a field the
    /// device does not answer.
    pub fn field_values(&self, ids: &[u32]) -> Result<Vec<Result<FieldSample, u32>>, NodeError> {
        let call = "nvmlDeviceGetFieldValues";
        let f = self.need(self.fns().field_values, call)?;
        let mut vals: Vec<mf::FieldValue> = ids
            .iter()
            .map(|&id| mf::FieldValue {
                field_id: id,
                ..Default::default()
            })
            .collect();
        let n = c_int::try_from(vals.len()).unwrap_or(c_int::MAX);
        // SAFETY: vals holds n initialised nvmlFieldValue_t with their ids set.
        let rc = unsafe { f(self.handle, n, vals.as_mut_ptr()) };
        self.chk(rc, call)?;
        Ok(vals.iter().map(decode_field).collect())
    }

    /// A running-process list (compute, graphics or MPS clients).
    pub fn processes(&self, kind: ProcessKind) -> Result<Vec<ProcessUse>, NodeError> {
        let (f, call) = match kind {
            ProcessKind::Compute => (
                self.fns().compute_processes_v3,
                "nvmlDeviceGetComputeRunningProcesses_v3",
            ),
            ProcessKind::Graphics => (
                self.fns().graphics_processes_v3,
                "nvmlDeviceGetGraphicsRunningProcesses_v3",
            ),
            ProcessKind::Mps => (
                self.fns().mps_processes_v3,
                "nvmlDeviceGetMPSComputeRunningProcesses_v3",
            ),
        };
        let f = self.need(f, call)?;
        let mut count: c_uint = 0;
        // SAFETY: a null array with count 0 asks for the size (nvml.h).
        let rc = unsafe { f(self.handle, &mut count, std::ptr::null_mut()) };
        if rc == ffi::SUCCESS {
            return Ok(Vec::new());
        }
        if rc != ERROR_INSUFFICIENT_SIZE {
            self.chk(rc, call)?;
        }
        // Room for processes started between the two calls.
        let mut cap = count.saturating_add(8).min(MAX_PROCESSES);
        let mut buf = vec![mf::ProcessInfo::default(); cap as usize];
        // SAFETY: buf holds `cap` writable entries and cap says so.
        let rc = unsafe { f(self.handle, &mut cap, buf.as_mut_ptr()) };
        self.chk(rc, call)?;
        buf.truncate((cap as usize).min(buf.len()));
        Ok(buf
            .iter()
            .map(|p| ProcessUse {
                pid: p.pid,
                used_bytes: (p.used_gpu_memory != VALUE_NOT_AVAILABLE).then_some(p.used_gpu_memory),
                kind,
            })
            .collect())
    }

    /// `nvmlDeviceGetProcessUtilization` samples newer than `last_seen_us` (empty when there
    /// are none: `NVML_ERROR_NOT_FOUND`).
    pub fn process_utilization(&self, last_seen_us: u64) -> Result<Vec<ProcessSample>, NodeError> {
        let call = "nvmlDeviceGetProcessUtilization";
        let f = self.need(self.fns().process_utilization, call)?;
        let mut count: c_uint = 0;
        // SAFETY: a null buffer asks for the number of samples (nvml.h).
        let rc = unsafe { f(self.handle, std::ptr::null_mut(), &mut count, last_seen_us) };
        if rc == ffi::ERROR_NOT_FOUND || (rc == ffi::SUCCESS && count == 0) {
            return Ok(Vec::new());
        }
        if rc != ERROR_INSUFFICIENT_SIZE && rc != ffi::SUCCESS {
            self.chk(rc, call)?;
        }
        let mut cap = count.saturating_add(8).min(MAX_PROCESSES);
        let mut buf = vec![mf::ProcessUtilizationSample::default(); cap as usize];
        // SAFETY: buf holds `cap` writable samples and cap says so.
        let rc = unsafe { f(self.handle, buf.as_mut_ptr(), &mut cap, last_seen_us) };
        if rc == ffi::ERROR_NOT_FOUND {
            return Ok(Vec::new());
        }
        self.chk(rc, call)?;
        buf.truncate((cap as usize).min(buf.len()));
        Ok(buf
            .iter()
            .map(|s| ProcessSample {
                pid: s.pid,
                timestamp_us: s.time_stamp,
                sm: s.sm_util,
                mem: s.mem_util,
                enc: s.enc_util,
                dec: s.dec_util,
            })
            .collect())
    }
}

/// `NVML_ERROR_INSUFFICIENT_SIZE`.
const ERROR_INSUFFICIENT_SIZE: u32 = 7;

/// `nvmlValueType_t`: DOUBLE 0, UNSIGNED_INT 1, UNSIGNED_LONG 2, UNSIGNED_LONG_LONG 3,
/// SIGNED_LONG_LONG 4, SIGNED_INT 5, UNSIGNED_SHORT 6.
fn decode_field(v: &mf::FieldValue) -> Result<FieldSample, u32> {
    if v.nvml_return != ffi::SUCCESS {
        return Err(v.nvml_return);
    }
    let bytes = v.value.to_ne_bytes();
    let low32 = u32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    Ok(match v.value_type {
        0 => FieldSample::F64(f64::from_bits(v.value)),
        1 => FieldSample::U64(u64::from(low32)),
        2 | 3 => FieldSample::U64(v.value),
        4 => FieldSample::I64(i64::from_ne_bytes(bytes)),
        5 => FieldSample::I64(i64::from(i32::from_ne_bytes([
            bytes[0], bytes[1], bytes[2], bytes[3],
        ]))),
        6 => FieldSample::U64(u64::from(u16::from_ne_bytes([bytes[0], bytes[1]]))),
        _ => return Err(ffi::ERROR_NOT_SUPPORTED),
    })
}

#[cfg(test)]
#[path = "metrics_tests.rs"]
mod tests;
