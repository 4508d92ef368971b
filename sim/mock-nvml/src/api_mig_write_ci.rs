//! Compute instance creation and instance destruction (see the parent module).

use std::os::raw::c_uint;

use gpuhook_sim::mig_state::{self, SimCi};

use super::{in_use, write_gpu, NVML_ERROR_INSUFFICIENT_RESOURCES, NVML_ERROR_IN_USE};
use crate::api_instances::instance_handle;
use crate::ffi::{self, NvmlReturn};
use crate::ffi_mig::{NvmlComputeInstance, NvmlGpuInstance};
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

/// # Safety
/// `compute_instance` must be null or valid for a write of an `nvmlComputeInstance_t`.
#[no_mangle]
pub unsafe extern "C" fn nvmlGpuInstanceCreateComputeInstance(
    gpu_instance: NvmlGpuInstance,
    profile_id: c_uint,
    compute_instance: *mut NvmlComputeInstance,
) -> NvmlReturn {
    guard(|| {
        let out = nonnull(compute_instance)?;
        let t = state::table()?;
        let (gpu, gi) = t
            .find_gi(gpu_instance.cast())
            .ok_or(ffi::NVML_ERROR_INVALID_ARGUMENT)?;
        let (index, gi_id) = (gpu.index as usize, gi.id);
        let slices = ci_slices(profile_id).ok_or(ffi::NVML_ERROR_INVALID_ARGUMENT)?;
        let (ci_id, t) = write_gpu("nvmlGpuInstanceCreateComputeInstance", index, |gpu, st| {
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
            let used: c_uint = g.cis.iter().map(|c| c.slices).sum();
            if used + slices > gi_slices {
                return Err(NVML_ERROR_INSUFFICIENT_RESOURCES);
            }
            let id = (0..8)
                .find(|i| !g.cis.iter().any(|c| c.id == *i))
                .ok_or(NVML_ERROR_INSUFFICIENT_RESOURCES)?;
            let uuid = mig_state::mig_uuid(&gpu.uuid, gi_id, id, serial);
            g.cis.push(SimCi {
                id,
                profile: profile_id,
                slices,
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
        // SAFETY: non-null; valid for a write per the contract.
        unsafe { put(out, instance_handle(ci)) }
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
