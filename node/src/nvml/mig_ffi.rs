//! NVML's MIG management ABI (`nvml.h`, "Multi Instance GPU Management"): the structs and entry
//! points gpuhook's MIG manager calls, resolved from the loaded library when first asked for.
//! Layouts are pinned by the test at the bottom.

use std::os::raw::{c_char, c_uint, c_ulonglong, c_void};

use super::ffi::{NvmlDevice, NvmlReturn};

pub type NvmlGpuInstance = *mut c_void;
pub type NvmlComputeInstance = *mut c_void;

/// `NVML_GPU_INSTANCE_PROFILE_COUNT` of recent headers (profile indexes `0..0x12`; older drivers
/// answer `INVALID_ARGUMENT` past their own count, which ends the walk as well).
pub const GPU_INSTANCE_PROFILE_COUNT: c_uint = 0x12;
/// `NVML_COMPUTE_INSTANCE_PROFILE_COUNT`.
pub const COMPUTE_INSTANCE_PROFILE_COUNT: c_uint = 0x9;

/// `nvmlGpuInstancePlacement_t` / `nvmlComputeInstancePlacement_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Placement {
    pub start: c_uint,
    pub size: c_uint,
}

/// `nvmlGpuInstanceProfileInfo_v2_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct GiProfileInfoV2 {
    pub version: c_uint,
    pub id: c_uint,
    pub is_p2p_supported: c_uint,
    pub slice_count: c_uint,
    pub instance_count: c_uint,
    pub multiprocessor_count: c_uint,
    pub copy_engine_count: c_uint,
    pub decoder_count: c_uint,
    pub encoder_count: c_uint,
    pub jpeg_count: c_uint,
    pub ofa_count: c_uint,
    pub memory_size_mb: c_ulonglong,
    pub name: [c_char; 96],
}

/// `nvmlGpuInstanceProfileInfo_t` (v1: no version, no name). nvml.h: answered for a MIG-capable
/// GPU whether or not MIG mode is on (the versioned call needs MIG mode).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct GiProfileInfoV1 {
    pub id: c_uint,
    pub is_p2p_supported: c_uint,
    pub slice_count: c_uint,
    pub instance_count: c_uint,
    pub multiprocessor_count: c_uint,
    pub copy_engine_count: c_uint,
    pub decoder_count: c_uint,
    pub encoder_count: c_uint,
    pub jpeg_count: c_uint,
    pub ofa_count: c_uint,
    pub memory_size_mb: c_ulonglong,
}

/// `nvmlGpuInstanceProfileInfo_v2` (size | version << 24).
pub const GI_PROFILE_INFO_V2: c_uint = 0x0200_0098;

/// `nvmlGpuInstanceInfo_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct GiInfo {
    pub device: NvmlDevice,
    pub id: c_uint,
    pub profile_id: c_uint,
    pub placement: Placement,
}

/// `nvmlComputeInstanceProfileInfo_t` (v1).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CiProfileInfo {
    pub id: c_uint,
    pub slice_count: c_uint,
    pub instance_count: c_uint,
    pub multiprocessor_count: c_uint,
    pub shared_copy_engine_count: c_uint,
    pub shared_decoder_count: c_uint,
    pub shared_encoder_count: c_uint,
    pub shared_jpeg_count: c_uint,
    pub shared_ofa_count: c_uint,
}

/// `nvmlComputeInstanceInfo_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CiInfo {
    pub device: NvmlDevice,
    pub gpu_instance: NvmlGpuInstance,
    pub id: c_uint,
    pub profile_id: c_uint,
    pub placement: Placement,
}

type FnSetMigMode = unsafe extern "C" fn(NvmlDevice, c_uint, *mut NvmlReturn) -> NvmlReturn;
type FnGiProfileInfoV =
    unsafe extern "C" fn(NvmlDevice, c_uint, *mut GiProfileInfoV2) -> NvmlReturn;
type FnGiProfileInfo = unsafe extern "C" fn(NvmlDevice, c_uint, *mut GiProfileInfoV1) -> NvmlReturn;
type FnPlacements =
    unsafe extern "C" fn(NvmlDevice, c_uint, *mut Placement, *mut c_uint) -> NvmlReturn;
type FnGpuInstances =
    unsafe extern "C" fn(NvmlDevice, c_uint, *mut NvmlGpuInstance, *mut c_uint) -> NvmlReturn;
type FnGiById = unsafe extern "C" fn(NvmlDevice, c_uint, *mut NvmlGpuInstance) -> NvmlReturn;
type FnGiInfo = unsafe extern "C" fn(NvmlGpuInstance, *mut GiInfo) -> NvmlReturn;
type FnCreateGi = unsafe extern "C" fn(NvmlDevice, c_uint, *mut NvmlGpuInstance) -> NvmlReturn;
type FnCreateGiPlaced =
    unsafe extern "C" fn(NvmlDevice, c_uint, *const Placement, *mut NvmlGpuInstance) -> NvmlReturn;
type FnCiProfileInfo =
    unsafe extern "C" fn(NvmlGpuInstance, c_uint, c_uint, *mut CiProfileInfo) -> NvmlReturn;
type FnComputeInstances = unsafe extern "C" fn(
    NvmlGpuInstance,
    c_uint,
    *mut NvmlComputeInstance,
    *mut c_uint,
) -> NvmlReturn;
type FnCiById =
    unsafe extern "C" fn(NvmlGpuInstance, c_uint, *mut NvmlComputeInstance) -> NvmlReturn;
type FnCiInfo = unsafe extern "C" fn(NvmlComputeInstance, *mut CiInfo) -> NvmlReturn;
type FnCreateCi =
    unsafe extern "C" fn(NvmlGpuInstance, c_uint, *mut NvmlComputeInstance) -> NvmlReturn;
type FnDestroy = unsafe extern "C" fn(*mut c_void) -> NvmlReturn;

/// The MIG entry points; every one is required (a driver without them cannot manage MIG).
#[derive(Debug, Clone, Copy)]
pub struct MigFns {
    pub set_mig_mode: FnSetMigMode,
    pub gi_profile_info_v: FnGiProfileInfoV,
    pub gi_profile_info: FnGiProfileInfo,
    pub possible_placements_v2: FnPlacements,
    pub gpu_instances: FnGpuInstances,
    pub gi_by_id: FnGiById,
    pub gi_info: FnGiInfo,
    pub create_gi: FnCreateGi,
    pub create_gi_placed: FnCreateGiPlaced,
    pub ci_profile_info: FnCiProfileInfo,
    pub compute_instances: FnComputeInstances,
    pub ci_by_id: FnCiById,
    pub ci_info_v2: FnCiInfo,
    pub create_ci: FnCreateCi,
    pub gi_destroy: FnDestroy,
    pub ci_destroy: FnDestroy,
}

impl MigFns {
    /// Resolves every entry point; `Err(name)` names the first one missing.
    pub fn load(lib: &libloading::Library) -> Result<MigFns, &'static str> {
        macro_rules! req {
            ($name:literal) => {
                // SAFETY: the field's type is the C signature of `$name` from nvml.h.
                unsafe { lib.get(concat!($name, "\0").as_bytes()) }
                    .map(|s| *s)
                    .map_err(|_| $name)?
            };
        }
        Ok(MigFns {
            set_mig_mode: req!("nvmlDeviceSetMigMode"),
            gi_profile_info_v: req!("nvmlDeviceGetGpuInstanceProfileInfoV"),
            gi_profile_info: req!("nvmlDeviceGetGpuInstanceProfileInfo"),
            possible_placements_v2: req!("nvmlDeviceGetGpuInstancePossiblePlacements_v2"),
            gpu_instances: req!("nvmlDeviceGetGpuInstances"),
            gi_by_id: req!("nvmlDeviceGetGpuInstanceById"),
            gi_info: req!("nvmlGpuInstanceGetInfo"),
            create_gi: req!("nvmlDeviceCreateGpuInstance"),
            create_gi_placed: req!("nvmlDeviceCreateGpuInstanceWithPlacement"),
            ci_profile_info: req!("nvmlGpuInstanceGetComputeInstanceProfileInfo"),
            compute_instances: req!("nvmlGpuInstanceGetComputeInstances"),
            ci_by_id: req!("nvmlGpuInstanceGetComputeInstanceById"),
            ci_info_v2: req!("nvmlComputeInstanceGetInfo_v2"),
            create_ci: req!("nvmlGpuInstanceCreateComputeInstance"),
            gi_destroy: req!("nvmlGpuInstanceDestroy"),
            ci_destroy: req!("nvmlComputeInstanceDestroy"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn layouts_match_nvml_h() {
        assert_eq!(size_of::<GiProfileInfoV2>(), 152);
        assert_eq!(size_of::<GiProfileInfoV1>(), 48);
        assert_eq!(offset_of!(GiProfileInfoV1, memory_size_mb), 40);
        assert_eq!(offset_of!(GiProfileInfoV2, memory_size_mb), 48);
        assert_eq!(offset_of!(GiProfileInfoV2, name), 56);
        assert_eq!(GI_PROFILE_INFO_V2 & 0xff_ffff, 152);
        assert_eq!(size_of::<GiInfo>(), 24);
        assert_eq!(size_of::<CiProfileInfo>(), 36);
        assert_eq!(size_of::<CiInfo>(), 32);
    }
}
