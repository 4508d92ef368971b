//! Running processes and per-process utilization samples, from the `processes-<uuid>` files of
//! [`crate::telemetry`]. A GPU lists its own processes and, when MIG is enabled, its MIG devices'
//! (with their GPU/compute instance ids, as NVML does for a privileged caller); a MIG handle lists
//! its own. `nvmlDeviceGetProcessUtilization` is `NOT_SUPPORTED` on a MIG handle, like on a real
//! MIG device.

use std::os::raw::{c_uint, c_ulonglong};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::api_device::with_device;
use crate::ffi::{self, NvmlDevice, NvmlReturn};
use crate::out::{nonnull, put};
use crate::table::{Dev, Table};
use crate::telemetry::{processes, values, Proc};

/// `nvmlProcessInfo_t` of the `_v3` queries.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct NvmlProcessInfo {
    pub pid: c_uint,
    pub used_gpu_memory: c_ulonglong,
    pub gpu_instance_id: c_uint,
    pub compute_instance_id: c_uint,
}

/// `nvmlProcessUtilizationSample_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct NvmlProcessUtilizationSample {
    pub pid: c_uint,
    pub time_stamp: c_ulonglong,
    pub sm_util: c_uint,
    pub mem_util: c_uint,
    pub enc_util: c_uint,
    pub dec_util: c_uint,
}

const NO_INSTANCE: c_uint = 0xFFFF_FFFF;
const MIB: u64 = 1024 * 1024;

/// `(process, gi, ci)` of a device, as the running-process queries list them.
fn listed(t: &Table, d: Dev<'_>) -> Vec<(Proc, c_uint, c_uint)> {
    match d {
        Dev::Mig(_, m) => processes(t, &m.uuid)
            .into_iter()
            .map(|p| (p, m.gi, m.ci))
            .collect(),
        Dev::Gpu(g) => {
            let mut out: Vec<_> = processes(t, &g.uuid)
                .into_iter()
                .map(|p| (p, NO_INSTANCE, NO_INSTANCE))
                .collect();
            for m in &g.migs {
                out.extend(processes(t, &m.uuid).into_iter().map(|p| (p, m.gi, m.ci)));
            }
            out
        }
    }
}

/// The NVML list protocol: `*count` in = room, out = needed; `INSUFFICIENT_SIZE` when short.
///
/// # Safety
/// `count` must be null or valid for reads and writes of an `unsigned int`; `out` null or valid
/// for writes of `*count` entries.
unsafe fn fill<T: Copy>(count: *mut c_uint, out: *mut T, items: &[T]) -> Result<(), NvmlReturn> {
    let count = nonnull(count)?;
    // SAFETY: non-null, valid per the contract.
    let room = unsafe { count.read_unaligned() } as usize;
    let needed = c_uint::try_from(items.len()).unwrap_or(c_uint::MAX);
    // SAFETY: as above.
    unsafe { count.write_unaligned(needed) };
    if items.is_empty() {
        return Ok(());
    }
    if out.is_null() || room < items.len() {
        return Err(ffi::NVML_ERROR_INSUFFICIENT_SIZE);
    }
    for (i, item) in items.iter().enumerate() {
        // SAFETY: i < room entries, valid for writes per the contract.
        unsafe { put(out.add(i), *item)? };
    }
    Ok(())
}

fn running(
    kind: u8,
    device: NvmlDevice,
    count: *mut c_uint,
    infos: *mut NvmlProcessInfo,
) -> NvmlReturn {
    with_device(device, |t, d| {
        values(t, d)?;
        let items: Vec<NvmlProcessInfo> = listed(t, d)
            .into_iter()
            .filter(|(p, _, _)| p.kind == kind)
            .map(|(p, gi, ci)| NvmlProcessInfo {
                pid: p.pid,
                used_gpu_memory: p.used_mib.saturating_mul(MIB),
                gpu_instance_id: gi,
                compute_instance_id: ci,
            })
            .collect();
        // SAFETY: forwarded caller contract.
        unsafe { fill(count, infos, &items) }
    })
}

/// # Safety
/// `count` must be valid for reads and writes; `infos` null or valid for `*count` entries.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(
    device: NvmlDevice,
    count: *mut c_uint,
    infos: *mut NvmlProcessInfo,
) -> NvmlReturn {
    running(0, device, count, infos)
}

/// # Safety
/// As [`nvmlDeviceGetComputeRunningProcesses_v3`].
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGraphicsRunningProcesses_v3(
    device: NvmlDevice,
    count: *mut c_uint,
    infos: *mut NvmlProcessInfo,
) -> NvmlReturn {
    running(1, device, count, infos)
}

/// # Safety
/// As [`nvmlDeviceGetComputeRunningProcesses_v3`].
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMPSComputeRunningProcesses_v3(
    device: NvmlDevice,
    count: *mut c_uint,
    infos: *mut NvmlProcessInfo,
) -> NvmlReturn {
    running(2, device, count, infos)
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// Samples of the GPU's processes, stamped now (so every `lastSeenTimeStamp` before now sees
/// them); `NOT_FOUND` when no process has a sample.
///
/// # Safety
/// `count` must be valid for reads and writes; `samples` null or valid for `*count` entries.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetProcessUtilization(
    device: NvmlDevice,
    samples: *mut NvmlProcessUtilizationSample,
    count: *mut c_uint,
    last_seen: c_ulonglong,
) -> NvmlReturn {
    with_device(device, |t, d| {
        if d.whole_gpu()?.mig_enabled {
            return Err(ffi::NVML_ERROR_NOT_SUPPORTED);
        }
        values(t, d)?;
        let now = now_us();
        let items: Vec<NvmlProcessUtilizationSample> = listed(t, d)
            .into_iter()
            .filter(|_| now > last_seen)
            .map(|(p, _, _)| NvmlProcessUtilizationSample {
                pid: p.pid,
                time_stamp: now,
                sm_util: p.sm,
                mem_util: p.mem,
                enc_util: 0,
                dec_util: 0,
            })
            .collect();
        if items.is_empty() {
            return Err(ffi::NVML_ERROR_NOT_FOUND);
        }
        // SAFETY: forwarded caller contract.
        unsafe { fill(count, samples, &items) }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn layouts_match_nvml_h() {
        assert_eq!(size_of::<NvmlProcessInfo>(), 24);
        assert_eq!(offset_of!(NvmlProcessInfo, gpu_instance_id), 16);
        assert_eq!(size_of::<NvmlProcessUtilizationSample>(), 32);
        assert_eq!(offset_of!(NvmlProcessUtilizationSample, sm_util), 16);
    }
}
