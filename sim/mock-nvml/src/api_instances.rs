//! MIG instance entry points: device attributes of a MIG device, GPU instances of a GPU and
//! compute instances of a GPU instance, with their infos.
//!
//! Handles of instances are addresses of entries of the leaked table, compared and never
//! dereferenced (see [`crate::table`]), so a forged handle is `INVALID_ARGUMENT`. Return codes follow
//! `nvml.h`: instance queries on a GPU without MIG mode are `NOT_SUPPORTED`, an unknown instance
//! id is `NOT_FOUND`, an unknown profile id `INVALID_ARGUMENT`.

use std::os::raw::c_uint;

use crate::api_device::with_device;
use crate::ffi::{self, NvmlDevice, NvmlReturn};
use crate::ffi_mig::{
    NvmlComputeInstance, NvmlComputeInstanceInfo, NvmlDeviceAttributes, NvmlGpuInstance,
    NvmlGpuInstanceInfo, NvmlPlacement,
};
use crate::instances::{sms_per_slice, ComputeInstance, GpuInstance};
use crate::out::{guard, nonnull, put};
use crate::state;
use crate::table::{handle_of, Gpu};

const MIB: u64 = 1024 * 1024;

/// The opaque handle of an instance entry.
pub(crate) fn instance_handle<T, H>(entry: &T) -> *mut H {
    (entry as *const T).cast_mut().cast()
}

/// Resolves a GPU instance handle (after checking init), then runs `f`.
pub(crate) fn with_gi(
    handle: NvmlGpuInstance,
    f: impl FnOnce(&'static Gpu, &'static GpuInstance) -> Result<(), NvmlReturn>,
) -> NvmlReturn {
    guard(|| {
        let t = state::table()?;
        let (gpu, gi) = t
            .find_gi(handle.cast())
            .ok_or(ffi::NVML_ERROR_INVALID_ARGUMENT)?;
        f(gpu, gi)
    })
}

/// Writes `items` to a caller's array and their number to `count`.
///
/// # Safety
/// `out` must be valid for writes of as many elements as NVML's profile info promises
/// (`instanceCount`), which bounds `items`; `count` null or valid for a write.
unsafe fn put_list<T: Copy>(
    out: *mut T,
    count: *mut c_uint,
    items: &[T],
) -> Result<(), NvmlReturn> {
    let (out, count) = (nonnull(out)?, nonnull(count)?);
    for (i, item) in items.iter().enumerate() {
        // SAFETY: the caller's array holds at least `instanceCount` >= items.len() elements.
        unsafe { out.add(i).write_unaligned(*item) };
    }
    let n = c_uint::try_from(items.len()).map_err(|_| ffi::NVML_ERROR_UNKNOWN)?;
    // SAFETY: non-null; valid for a write per the contract.
    unsafe { put(count, n) }
}

fn attributes_of(
    gpu: &Gpu,
    gi: &GpuInstance,
    ci: &ComputeInstance,
    memory_mb: u64,
) -> NvmlDeviceAttributes {
    let [ce, dec, enc, jpeg, ofa] = gi.profile.engines;
    NvmlDeviceAttributes {
        multiprocessor_count: ci.slices * sms_per_slice(&gpu.name),
        shared_copy_engine_count: ce,
        shared_decoder_count: dec,
        shared_encoder_count: enc,
        shared_jpeg_count: jpeg,
        shared_ofa_count: ofa,
        gpu_instance_slice_count: gi.profile.slices,
        compute_instance_slice_count: ci.slices,
        memory_size_mb: memory_mb,
    }
}

/// Engine and slice counts of a MIG device; `NOT_SUPPORTED` for a full GPU (nvml.h: "currently
/// only supports MIG device handles").
///
/// # Safety
/// `attributes` must be null or valid for a write of an `nvmlDeviceAttributes_t`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetAttributes_v2(
    device: NvmlDevice,
    attributes: *mut NvmlDeviceAttributes,
) -> NvmlReturn {
    with_device(device, |_, d| {
        let attributes = nonnull(attributes)?;
        let (gpu, mig) = d.mig()?;
        let gi = gpu
            .gis
            .iter()
            .find(|g| g.id == mig.gi)
            .ok_or(ffi::NVML_ERROR_UNKNOWN)?;
        let ci = gi
            .cis
            .iter()
            .find(|c| c.id == mig.ci)
            .ok_or(ffi::NVML_ERROR_UNKNOWN)?;
        let value = attributes_of(gpu, gi, ci, mig.memory_bytes / MIB);
        // SAFETY: forwarded caller contract.
        unsafe { put(attributes, value) }
    })
}

/// The unversioned name of [`nvmlDeviceGetAttributes_v2`] (go-nvml binds both).
///
/// # Safety
/// As [`nvmlDeviceGetAttributes_v2`].
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetAttributes(
    device: NvmlDevice,
    attributes: *mut NvmlDeviceAttributes,
) -> NvmlReturn {
    // SAFETY: forwarded caller contract.
    unsafe { nvmlDeviceGetAttributes_v2(device, attributes) }
}

/// The GPU of a handle in MIG mode, else `NOT_SUPPORTED`.
fn mig_gpu(d: crate::table::Dev<'static>) -> Result<&'static Gpu, NvmlReturn> {
    let gpu = d.whole_gpu()?;
    if gpu.mig_enabled {
        Ok(gpu)
    } else {
        Err(ffi::NVML_ERROR_NOT_SUPPORTED)
    }
}

/// GPU instances of profile id `profile_id`.
///
/// # Safety
/// `gpu_instances` must hold the profile's `instanceCount` handles; `count` null or valid.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstances(
    device: NvmlDevice,
    profile_id: c_uint,
    gpu_instances: *mut NvmlGpuInstance,
    count: *mut c_uint,
) -> NvmlReturn {
    crate::calls::read("nvmlDeviceGetGpuInstances");
    with_device(device, |_, d| {
        let gpu = mig_gpu(d)?;
        if !gpu.profiles.iter().any(|p| p.id == profile_id) {
            return Err(ffi::NVML_ERROR_INVALID_ARGUMENT);
        }
        let found: Vec<NvmlGpuInstance> = gpu
            .gis
            .iter()
            .filter(|g| g.profile.id == profile_id)
            .map(instance_handle)
            .collect();
        // SAFETY: forwarded caller contract.
        unsafe { put_list(gpu_instances, count, &found) }
    })
}

/// The GPU instance with id `id`; `NOT_FOUND` when there is none.
///
/// # Safety
/// `gpu_instance` must be null or valid for a write of an `nvmlGpuInstance_t`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceById(
    device: NvmlDevice,
    id: c_uint,
    gpu_instance: *mut NvmlGpuInstance,
) -> NvmlReturn {
    crate::calls::read("nvmlDeviceGetGpuInstanceById");
    with_device(device, |_, d| {
        let gpu_instance = nonnull(gpu_instance)?;
        let gpu = mig_gpu(d)?;
        let gi = gpu
            .gis
            .iter()
            .find(|g| g.id == id)
            .ok_or(ffi::NVML_ERROR_NOT_FOUND)?;
        // SAFETY: forwarded caller contract.
        unsafe { put(gpu_instance, instance_handle(gi)) }
    })
}

/// Parent device, id, profile id and placement of a GPU instance.
///
/// # Safety
/// `info` must be null or valid for a write of an `nvmlGpuInstanceInfo_t`.
#[no_mangle]
pub unsafe extern "C" fn nvmlGpuInstanceGetInfo(
    gpu_instance: NvmlGpuInstance,
    info: *mut NvmlGpuInstanceInfo,
) -> NvmlReturn {
    crate::calls::read("nvmlGpuInstanceGetInfo");
    with_gi(gpu_instance, |gpu, gi| {
        let value = NvmlGpuInstanceInfo {
            device: handle_of(gpu),
            id: gi.id,
            profile_id: gi.profile.id,
            // NVML reports the placement's memory-slice span (a 3g.40gb spans 4), which is
            // the profile's placement size, not its compute slices.
            placement: NvmlPlacement {
                start: gi.start,
                size: crate::mig_overlay::placement_size(gpu, &gi.profile),
            },
        };
        // SAFETY: forwarded caller contract.
        unsafe { put(info, value) }
    })
}

/// Compute instances of profile id `profile_id` in a GPU instance.
///
/// # Safety
/// `compute_instances` must hold the CI profile's `instanceCount` handles; `count` null or valid.
#[no_mangle]
pub unsafe extern "C" fn nvmlGpuInstanceGetComputeInstances(
    gpu_instance: NvmlGpuInstance,
    profile_id: c_uint,
    compute_instances: *mut NvmlComputeInstance,
    count: *mut c_uint,
) -> NvmlReturn {
    crate::calls::read("nvmlGpuInstanceGetComputeInstances");
    with_gi(gpu_instance, |_, gi| {
        if profile_id >= crate::ffi_mig::NVML_COMPUTE_INSTANCE_PROFILE_COUNT {
            return Err(ffi::NVML_ERROR_INVALID_ARGUMENT);
        }
        let found: Vec<NvmlComputeInstance> = gi
            .cis
            .iter()
            .filter(|c| c.profile == profile_id)
            .map(instance_handle)
            .collect();
        // SAFETY: forwarded caller contract.
        unsafe { put_list(compute_instances, count, &found) }
    })
}

/// The compute instance with id `id`; `NOT_FOUND` when there is none.
///
/// # Safety
/// `compute_instance` must be null or valid for a write of an `nvmlComputeInstance_t`.
#[no_mangle]
pub unsafe extern "C" fn nvmlGpuInstanceGetComputeInstanceById(
    gpu_instance: NvmlGpuInstance,
    id: c_uint,
    compute_instance: *mut NvmlComputeInstance,
) -> NvmlReturn {
    with_gi(gpu_instance, |_, gi| {
        let compute_instance = nonnull(compute_instance)?;
        let ci = gi
            .cis
            .iter()
            .find(|c| c.id == id)
            .ok_or(ffi::NVML_ERROR_NOT_FOUND)?;
        // SAFETY: forwarded caller contract.
        unsafe { put(compute_instance, instance_handle(ci)) }
    })
}

/// Parent device, GPU instance, id, profile id and placement of a compute instance.
///
/// # Safety
/// `info` must be null or valid for a write of an `nvmlComputeInstanceInfo_t`.
#[no_mangle]
pub unsafe extern "C" fn nvmlComputeInstanceGetInfo_v2(
    compute_instance: NvmlComputeInstance,
    info: *mut NvmlComputeInstanceInfo,
) -> NvmlReturn {
    crate::calls::read("nvmlComputeInstanceGetInfo_v2");
    guard(|| {
        let info = nonnull(info)?;
        let t = state::table()?;
        let (gpu, gi, ci) = t
            .find_ci(compute_instance.cast())
            .ok_or(ffi::NVML_ERROR_INVALID_ARGUMENT)?;
        let value = NvmlComputeInstanceInfo {
            device: handle_of(gpu),
            gpu_instance: instance_handle(gi),
            id: ci.id,
            profile_id: ci.profile,
            placement: NvmlPlacement {
                start: ci.start,
                size: ci.slices,
            },
        };
        // SAFETY: forwarded caller contract.
        unsafe { put(info, value) }
    })
}

/// The unversioned name of [`nvmlComputeInstanceGetInfo_v2`] (go-nvml binds both).
///
/// # Safety
/// As [`nvmlComputeInstanceGetInfo_v2`].
#[no_mangle]
pub unsafe extern "C" fn nvmlComputeInstanceGetInfo(
    compute_instance: NvmlComputeInstance,
    info: *mut NvmlComputeInstanceInfo,
) -> NvmlReturn {
    // SAFETY: forwarded caller contract.
    unsafe { nvmlComputeInstanceGetInfo_v2(compute_instance, info) }
}
