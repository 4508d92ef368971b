//! Compute instance creation and instance destruction (see the parent module).

use std::os::raw::c_uint;

use gpuhook_sim::mig_state::{self, SimCi};

use super::{in_use, write_gpu, NVML_ERROR_INSUFFICIENT_RESOURCES, NVML_ERROR_IN_USE};
use crate::api_instances::instance_handle;
use crate::ffi::{self, NvmlReturn};
use crate::ffi_mig::{NvmlComputeInstance, NvmlGpuInstance, NvmlPlacement};
use crate::out::{guard, nonnull, put};
use crate::state;

/// Compute slices of `NVML_COMPUTE_INSTANCE_PROFILE_*` `profile`.
fn ci_slices(profile: c_uint) -> Option<c_uint> {
    Some(match profile {
        0 => 1,
        1 => 2,
        2 => 3,
        3 => 4,
        4 => 7,
        _ => return None,
    })
}

/// Creates a compute instance of `profile_id` in a GPU instance, at `placement` or the lowest
/// free start (a start is a multiple of the instance's slices inside the GPU instance).
fn create_ci(
    gpu_instance: NvmlGpuInstance,
    profile_id: c_uint,
    placement: Option<NvmlPlacement>,
    out: *mut NvmlComputeInstance,
) -> Result<(), NvmlReturn> {
    let out = nonnull(out)?;
    let t = state::table()?;
    let (gpu, gi) = t
        .find_gi(gpu_instance.cast())
        .ok_or(ffi::NVML_ERROR_INVALID_ARGUMENT)?;
    let (index, gi_id) = (gpu.index as usize, gi.id);
    let slices = ci_slices(profile_id).ok_or(ffi::NVML_ERROR_INVALID_ARGUMENT)?;
    let call = if placement.is_some() {
        "nvmlGpuInstanceCreateComputeInstanceWithPlacement"
    } else {
        "nvmlGpuInstanceCreateComputeInstance"
    };
    let (ci_id, t) = write_gpu(call, index, |gpu, st| {
        let serial = st.serial + 1;
        let gi_slices = gpu
            .gis
            .iter()
            .find(|g| g.id == gi_id)
            .map(|g| g.profile.slices)
            .ok_or(ffi::NVML_ERROR_INVALID_ARGUMENT)?;
        let g = st
            .instances
            .iter_mut()
            .find(|g| g.id == gi_id)
            .ok_or(ffi::NVML_ERROR_INVALID_ARGUMENT)?;
        if slices > gi_slices {
            return Err(ffi::NVML_ERROR_NOT_SUPPORTED);
        }
        let valid: Vec<c_uint> = (0..gi_slices)
            .filter(|s| s % slices == 0 && s + slices <= gi_slices)
            .collect();
        let free = |s: c_uint| {
            !g.cis
                .iter()
                .any(|c| c.start < s + slices && s < c.start + c.slices)
        };
        let start = match placement {
            Some(p) if p.size != slices || !valid.contains(&p.start) => {
                return Err(ffi::NVML_ERROR_INVALID_ARGUMENT)
            }
            Some(p) => Some(p.start).filter(|&s| free(s)),
            None => valid.iter().copied().find(|&s| free(s)),
        }
        .ok_or(NVML_ERROR_INSUFFICIENT_RESOURCES)?;
        let id = (0..8)
            .find(|i| !g.cis.iter().any(|c| c.id == *i))
            .ok_or(NVML_ERROR_INSUFFICIENT_RESOURCES)?;
        let uuid = mig_state::mig_uuid(&gpu.uuid, gi_id, id, serial);
        g.cis.push(SimCi {
            id,
            profile: profile_id,
            slices,
            start,
            uuid,
        });
        g.cis.sort_by_key(|c| c.id);
        st.serial = serial;
        Ok(id)
    })?;
    let ci = t.gpus[index]
        .gis
        .iter()
        .find(|g| g.id == gi_id)
        .and_then(|g| g.cis.iter().find(|c| c.id == ci_id))
        .ok_or(ffi::NVML_ERROR_UNKNOWN)?;
    // SAFETY: non-null; valid for a write per the caller's contract.
    unsafe { put(out, instance_handle(ci)) }
}

/// # Safety
/// `compute_instance` must be null or valid for a write of an `nvmlComputeInstance_t`.
#[no_mangle]
pub unsafe extern "C" fn nvmlGpuInstanceCreateComputeInstance(
    gpu_instance: NvmlGpuInstance,
    profile_id: c_uint,
    compute_instance: *mut NvmlComputeInstance,
) -> NvmlReturn {
    guard(|| create_ci(gpu_instance, profile_id, None, compute_instance))
}

/// # Safety
/// `placement` must be null or valid for a read; `compute_instance` null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlGpuInstanceCreateComputeInstanceWithPlacement(
    gpu_instance: NvmlGpuInstance,
    profile_id: c_uint,
    placement: *const NvmlPlacement,
    compute_instance: *mut NvmlComputeInstance,
) -> NvmlReturn {
    guard(|| {
        let p = nonnull(placement.cast_mut())?;
        // SAFETY: non-null and valid for a read per the contract.
        let p = unsafe { p.read_unaligned() };
        create_ci(gpu_instance, profile_id, Some(p), compute_instance)
    })
}

/// Destroys a compute instance; `IN_USE` while the GPU is held.
#[no_mangle]
pub extern "C" fn nvmlComputeInstanceDestroy(compute_instance: NvmlComputeInstance) -> NvmlReturn {
    guard(|| {
        let t = state::table()?;
        let (gpu, gi, ci) = t
            .find_ci(compute_instance.cast())
            .ok_or(ffi::NVML_ERROR_INVALID_ARGUMENT)?;
        if in_use(t, gpu) {
            return Err(NVML_ERROR_IN_USE);
        }
        let (gi_id, ci_id) = (gi.id, ci.id);
        write_gpu("nvmlComputeInstanceDestroy", gpu.index as usize, |_, st| {
            let g = st
                .instances
                .iter_mut()
                .find(|g| g.id == gi_id)
                .ok_or(ffi::NVML_ERROR_INVALID_ARGUMENT)?;
            g.cis.retain(|c| c.id != ci_id);
            Ok(())
        })
        .map(drop)
    })
}

/// Destroys a GPU instance; `IN_USE` while it has compute instances or the GPU is held.
#[no_mangle]
pub extern "C" fn nvmlGpuInstanceDestroy(gpu_instance: NvmlGpuInstance) -> NvmlReturn {
    guard(|| {
        let t = state::table()?;
        let (gpu, gi) = t
            .find_gi(gpu_instance.cast())
            .ok_or(ffi::NVML_ERROR_INVALID_ARGUMENT)?;
        if in_use(t, gpu) || !gi.cis.is_empty() {
            return Err(NVML_ERROR_IN_USE);
        }
        let gi_id = gi.id;
        write_gpu("nvmlGpuInstanceDestroy", gpu.index as usize, |_, st| {
            st.instances.retain(|g| g.id != gi_id);
            Ok(())
        })
        .map(drop)
    })
}
