//! MIG profile-info entry points: the GPU instance profiles of a GPU in MIG mode and the compute
//! instance profiles of a GPU instance, in the v1 layout and the versioned (`...V`) v2/v3
//! layouts whose `version` field the caller sets first.
//!
//! Return codes follow `nvml.h`: a profile index past `NVML_*_PROFILE_COUNT` is
//! `INVALID_ARGUMENT` (consumers enumerate until they see it), a profile the model does not
//! support, or a GPU without MIG mode (versioned calls only: v1 answers with MIG mode off, as
//! nvml.h documents), is `NOT_SUPPORTED`; an unknown `version` is
//! `ARGUMENT_VERSION_MISMATCH`.

use std::os::raw::c_uint;

use crate::api_device::with_device;
use crate::api_instances::with_gi;
use crate::ffi::{self, NvmlDevice, NvmlReturn};
use crate::ffi_mig::{
    NvmlComputeInstanceProfileInfo, NvmlComputeInstanceProfileInfoV3, NvmlGpuInstance,
    NvmlGpuInstanceProfileInfo, NvmlGpuInstanceProfileInfoV2, NvmlGpuInstanceProfileInfoV3,
    CI_PROFILE_INFO_V2, CI_PROFILE_INFO_V3, GI_PROFILE_INFO_V2, GI_PROFILE_INFO_V3, NAME_V2,
    NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT, NVML_COMPUTE_INSTANCE_PROFILE_COUNT,
    NVML_GPU_INSTANCE_PROFILE_COUNT,
};
use crate::instances::{sms_per_slice, GiProfile, GpuInstance};
use crate::out::{fill_array, nonnull, put};
use crate::table::{Dev, Gpu};

/// The GI profile a lookup names, after NVML's checks (the versioned calls need MIG mode).
fn gi_profile(
    d: Dev<'static>,
    pick: impl Fn(&GiProfile) -> bool,
) -> Result<(&'static Gpu, &'static GiProfile), NvmlReturn> {
    gi_profile_in(d, pick, true)
}

/// `need_mode`: `NOT_SUPPORTED` without MIG mode too (nvml.h: the v1 call needs only a
/// MIG-capable GPU, the versioned ones MIG mode).
fn gi_profile_in(
    d: Dev<'static>,
    pick: impl Fn(&GiProfile) -> bool,
    need_mode: bool,
) -> Result<(&'static Gpu, &'static GiProfile), NvmlReturn> {
    let gpu = d.whole_gpu()?;
    if !gpu.mig_capable || (need_mode && !gpu.mig_enabled) {
        return Err(ffi::NVML_ERROR_NOT_SUPPORTED);
    }
    let p = gpu
        .profiles
        .iter()
        .find(|p| pick(p))
        .ok_or(ffi::NVML_ERROR_NOT_SUPPORTED)?;
    Ok((gpu, p))
}

fn gi_body(gpu: &Gpu, p: &GiProfile) -> NvmlGpuInstanceProfileInfo {
    let [ce, dec, enc, jpeg, ofa] = p.engines;
    NvmlGpuInstanceProfileInfo {
        id: p.id,
        is_p2p_supported: 0,
        slice_count: p.slices,
        instance_count: p.instance_count,
        multiprocessor_count: p.slices * sms_per_slice(&gpu.name),
        copy_engine_count: ce,
        decoder_count: dec,
        encoder_count: enc,
        jpeg_count: jpeg,
        ofa_count: ofa,
        memory_size_mb: p.memory_mb,
    }
}

/// Writes a v2 or v3 GI profile info, as the caller's `version` asks.
///
/// # Safety
/// `info` must be null or valid for reads and writes of an `nvmlGpuInstanceProfileInfo_v3_t`
/// (v2 and v3 have the same size).
unsafe fn put_gi_versioned(
    info: *mut NvmlGpuInstanceProfileInfoV3,
    gpu: &Gpu,
    p: &GiProfile,
) -> Result<(), NvmlReturn> {
    let info = nonnull(info)?;
    // SAFETY: valid for reads per the contract; `version` is the first field.
    let version = unsafe { info.cast::<c_uint>().read_unaligned() };
    let b = gi_body(gpu, p);
    let mut name = [0; NAME_V2];
    fill_array(&mut name, &format!("MIG {}", p.name));
    match version {
        GI_PROFILE_INFO_V2 => {
            let v2 = NvmlGpuInstanceProfileInfoV2 {
                version,
                id: b.id,
                is_p2p_supported: b.is_p2p_supported,
                slice_count: b.slice_count,
                instance_count: b.instance_count,
                multiprocessor_count: b.multiprocessor_count,
                copy_engine_count: b.copy_engine_count,
                decoder_count: b.decoder_count,
                encoder_count: b.encoder_count,
                jpeg_count: b.jpeg_count,
                ofa_count: b.ofa_count,
                memory_size_mb: b.memory_size_mb,
                name,
            };
            // SAFETY: same size as v3, valid for writes per the contract.
            unsafe { put(info.cast::<NvmlGpuInstanceProfileInfoV2>(), v2) }
        }
        GI_PROFILE_INFO_V3 => {
            let v3 = NvmlGpuInstanceProfileInfoV3 {
                version,
                id: b.id,
                slice_count: b.slice_count,
                instance_count: b.instance_count,
                multiprocessor_count: b.multiprocessor_count,
                copy_engine_count: b.copy_engine_count,
                decoder_count: b.decoder_count,
                encoder_count: b.encoder_count,
                jpeg_count: b.jpeg_count,
                ofa_count: b.ofa_count,
                memory_size_mb: b.memory_size_mb,
                name,
                capabilities: 0,
            };
            // SAFETY: valid for writes per the contract.
            unsafe { put(info, v3) }
        }
        _ => Err(ffi::NVML_ERROR_ARGUMENT_VERSION_MISMATCH),
    }
}

/// GPU instance profile `profile` (`NVML_GPU_INSTANCE_PROFILE_*`), v1 layout.
///
/// # Safety
/// `info` must be null or valid for a write of an `nvmlGpuInstanceProfileInfo_t`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceProfileInfo(
    device: NvmlDevice,
    profile: c_uint,
    info: *mut NvmlGpuInstanceProfileInfo,
) -> NvmlReturn {
    with_device(device, |_, d| {
        let info = nonnull(info)?;
        if profile >= NVML_GPU_INSTANCE_PROFILE_COUNT {
            return Err(ffi::NVML_ERROR_INVALID_ARGUMENT);
        }
        let (gpu, p) = gi_profile_in(d, |p| p.index == profile, false)?;
        let b = gi_body(gpu, p);
        // SAFETY: forwarded caller contract.
        unsafe { put(info, b) }
    })
}

/// GPU instance profile `profile`, versioned (v2 or v3) layout.
///
/// # Safety
/// `info` must be null or valid for reads and writes of an `nvmlGpuInstanceProfileInfo_v2_t`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceProfileInfoV(
    device: NvmlDevice,
    profile: c_uint,
    info: *mut NvmlGpuInstanceProfileInfoV3,
) -> NvmlReturn {
    crate::calls::read("nvmlDeviceGetGpuInstanceProfileInfoV");
    with_device(device, |_, d| {
        if profile >= NVML_GPU_INSTANCE_PROFILE_COUNT {
            return Err(ffi::NVML_ERROR_INVALID_ARGUMENT);
        }
        let (gpu, p) = gi_profile(d, |p| p.index == profile)?;
        // SAFETY: forwarded caller contract.
        unsafe { put_gi_versioned(info, gpu, p) }
    })
}

/// GPU instance profile by profile *id* (`nvidia-smi mig -lgip`'s ID), versioned layout.
///
/// # Safety
/// As [`nvmlDeviceGetGpuInstanceProfileInfoV`].
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceProfileInfoByIdV(
    device: NvmlDevice,
    profile_id: c_uint,
    info: *mut NvmlGpuInstanceProfileInfoV3,
) -> NvmlReturn {
    with_device(device, |_, d| {
        let (gpu, p) = gi_profile(d, |p| p.id == profile_id)?;
        // SAFETY: forwarded caller contract.
        unsafe { put_gi_versioned(info, gpu, p) }
    })
}

/// Slices of `NVML_COMPUTE_INSTANCE_PROFILE_*` `profile` that fits GPU instance `gi`, after
/// NVML's argument checks.
fn ci_slices(gi: &GpuInstance, profile: c_uint, eng: c_uint) -> Result<c_uint, NvmlReturn> {
    if profile >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT
        || eng >= NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT
    {
        return Err(ffi::NVML_ERROR_INVALID_ARGUMENT);
    }
    let slices = match profile {
        0 => 1,
        1 => 2,
        2 => 3,
        3 => 4,
        4 => 7,
        _ => return Err(ffi::NVML_ERROR_NOT_SUPPORTED),
    };
    if slices > gi.profile.slices {
        return Err(ffi::NVML_ERROR_NOT_SUPPORTED);
    }
    Ok(slices)
}

fn ci_body(
    gpu: &Gpu,
    gi: &GpuInstance,
    profile: c_uint,
    slices: c_uint,
) -> NvmlComputeInstanceProfileInfo {
    let [ce, dec, enc, jpeg, ofa] = gi.profile.engines;
    NvmlComputeInstanceProfileInfo {
        id: profile,
        slice_count: slices,
        instance_count: gi.profile.slices / slices,
        multiprocessor_count: slices * sms_per_slice(&gpu.name),
        shared_copy_engine_count: ce,
        shared_decoder_count: dec,
        shared_encoder_count: enc,
        shared_jpeg_count: jpeg,
        shared_ofa_count: ofa,
    }
}

/// Compute instance profile `profile` of a GPU instance, v1 layout.
///
/// # Safety
/// `info` must be null or valid for a write of an `nvmlComputeInstanceProfileInfo_t`.
#[no_mangle]
pub unsafe extern "C" fn nvmlGpuInstanceGetComputeInstanceProfileInfo(
    gpu_instance: NvmlGpuInstance,
    profile: c_uint,
    eng_profile: c_uint,
    info: *mut NvmlComputeInstanceProfileInfo,
) -> NvmlReturn {
    with_gi(gpu_instance, |gpu, gi| {
        let info = nonnull(info)?;
        let slices = ci_slices(gi, profile, eng_profile)?;
        // SAFETY: forwarded caller contract.
        unsafe { put(info, ci_body(gpu, gi, profile, slices)) }
    })
}

/// Compute instance profile `profile` of a GPU instance, versioned (v2 or v3) layout.
///
/// # Safety
/// `info` must be null or valid for reads of a `version` and writes of the struct it names.
#[no_mangle]
pub unsafe extern "C" fn nvmlGpuInstanceGetComputeInstanceProfileInfoV(
    gpu_instance: NvmlGpuInstance,
    profile: c_uint,
    eng_profile: c_uint,
    info: *mut NvmlComputeInstanceProfileInfoV3,
) -> NvmlReturn {
    with_gi(gpu_instance, |gpu, gi| {
        let info = nonnull(info)?;
        let slices = ci_slices(gi, profile, eng_profile)?;
        // SAFETY: valid for reads per the contract; `version` is the first field.
        let version = unsafe { info.cast::<c_uint>().read_unaligned() };
        let mut name = [0; NAME_V2];
        fill_array(&mut name, &format!("MIG {}c.{}", slices, gi.profile.name));
        let value = NvmlComputeInstanceProfileInfoV3 {
            version,
            body: ci_body(gpu, gi, profile, slices),
            name,
            capabilities: 0,
        };
        let bytes = match version {
            CI_PROFILE_INFO_V2 => std::mem::size_of::<NvmlComputeInstanceProfileInfoV3>() - 4,
            CI_PROFILE_INFO_V3 => std::mem::size_of::<NvmlComputeInstanceProfileInfoV3>(),
            _ => return Err(ffi::NVML_ERROR_ARGUMENT_VERSION_MISMATCH),
        };
        // SAFETY: `info` is valid for writes of the struct its version names (v2 = v3 minus the
        // trailing `capabilities`), and cannot overlap our local value.
        unsafe {
            std::ptr::copy_nonoverlapping(
                (&value as *const NvmlComputeInstanceProfileInfoV3).cast::<u8>(),
                info.cast::<u8>(),
                bytes,
            );
        }
        Ok(())
    })
}
