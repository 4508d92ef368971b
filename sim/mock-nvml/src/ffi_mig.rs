//! NVML's MIG types, as declared in `nvml.h` of NVML API 13 (the header vendored by go-nvml
//! v0.13.3-1 in NVIDIA Container Toolkit v1.20.0, `vendor/github.com/NVIDIA/go-nvml/pkg/nvml/nvml.h`):
//! device attributes, GPU/compute instance handles, infos and profile infos (v1, v2, v3).
//! The layout tests at the bottom pin sizes and offsets to the header's

use std::os::raw::{c_char, c_uint, c_ulonglong};

use crate::ffi::{struct_version, NvmlDevice};

/// `NVML_DEVICE_NAME_V2_BUFFER_SIZE`.
pub const NAME_V2: usize = 96;
/// `NVML_GPU_INSTANCE_PROFILE_COUNT`: profile indexes run `0..0x12`.
pub const NVML_GPU_INSTANCE_PROFILE_COUNT: c_uint = 0x12;
/// `NVML_COMPUTE_INSTANCE_PROFILE_COUNT`.
pub const NVML_COMPUTE_INSTANCE_PROFILE_COUNT: c_uint = 0x9;
/// `NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT` (only `SHARED` = 0 exists).
pub const NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT: c_uint = 0x1;

/// The opaque `struct nvmlGpuInstance_st`.
#[repr(C)]
#[derive(Debug)]
pub struct NvmlGpuInstanceSt {
    _private: [u8; 0],
}
/// `nvmlGpuInstance_t`.
pub type NvmlGpuInstance = *mut NvmlGpuInstanceSt;

/// The opaque `struct nvmlComputeInstance_st`.
#[repr(C)]
#[derive(Debug)]
pub struct NvmlComputeInstanceSt {
    _private: [u8; 0],
}
/// `nvmlComputeInstance_t`.
pub type NvmlComputeInstance = *mut NvmlComputeInstanceSt;

/// `nvmlDeviceAttributes_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct NvmlDeviceAttributes {
    pub multiprocessor_count: c_uint,
    pub shared_copy_engine_count: c_uint,
    pub shared_decoder_count: c_uint,
    pub shared_encoder_count: c_uint,
    pub shared_jpeg_count: c_uint,
    pub shared_ofa_count: c_uint,
    pub gpu_instance_slice_count: c_uint,
    pub compute_instance_slice_count: c_uint,
    pub memory_size_mb: c_ulonglong,
}

/// `nvmlGpuInstancePlacement_t` / `nvmlComputeInstancePlacement_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct NvmlPlacement {
    pub start: c_uint,
    pub size: c_uint,
}

/// `nvmlGpuInstanceProfileInfo_t` (v1).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct NvmlGpuInstanceProfileInfo {
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

/// `nvmlGpuInstanceProfileInfo_v2_t`: `version`, then the v1 fields (flat: nesting the v1 struct
/// would align it to 8 and move `id` from offset 4 to 8).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct NvmlGpuInstanceProfileInfoV2 {
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
    pub name: [c_char; NAME_V2],
}

/// `nvmlGpuInstanceProfileInfo_v3_t`: no `isP2pSupported`; `capabilities` at the end.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct NvmlGpuInstanceProfileInfoV3 {
    pub version: c_uint,
    pub id: c_uint,
    pub slice_count: c_uint,
    pub instance_count: c_uint,
    pub multiprocessor_count: c_uint,
    pub copy_engine_count: c_uint,
    pub decoder_count: c_uint,
    pub encoder_count: c_uint,
    pub jpeg_count: c_uint,
    pub ofa_count: c_uint,
    pub memory_size_mb: c_ulonglong,
    pub name: [c_char; NAME_V2],
    pub capabilities: c_uint,
}

/// `nvmlGpuInstanceInfo_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct NvmlGpuInstanceInfo {
    pub device: NvmlDevice,
    pub id: c_uint,
    pub profile_id: c_uint,
    pub placement: NvmlPlacement,
}

/// `nvmlComputeInstanceProfileInfo_t` (v1).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct NvmlComputeInstanceProfileInfo {
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

/// `nvmlComputeInstanceProfileInfo_v2_t` / `_v3_t` (v3 adds `capabilities`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct NvmlComputeInstanceProfileInfoV3 {
    pub version: c_uint,
    pub body: NvmlComputeInstanceProfileInfo,
    pub name: [c_char; NAME_V2],
    pub capabilities: c_uint,
}

/// `nvmlComputeInstanceInfo_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct NvmlComputeInstanceInfo {
    pub device: NvmlDevice,
    pub gpu_instance: NvmlGpuInstance,
    pub id: c_uint,
    pub profile_id: c_uint,
    pub placement: NvmlPlacement,
}

/// `nvmlGpuInstanceProfileInfo_v2`.
pub const GI_PROFILE_INFO_V2: c_uint =
    struct_version(std::mem::size_of::<NvmlGpuInstanceProfileInfoV2>(), 2);
/// `nvmlGpuInstanceProfileInfo_v3`.
pub const GI_PROFILE_INFO_V3: c_uint =
    struct_version(std::mem::size_of::<NvmlGpuInstanceProfileInfoV3>(), 3);
/// `nvmlComputeInstanceProfileInfo_v2`: the v2 struct is the v3 one without `capabilities`.
pub const CI_PROFILE_INFO_V2: c_uint = struct_version(
    std::mem::size_of::<NvmlComputeInstanceProfileInfoV3>() - 4,
    2,
);
/// `nvmlComputeInstanceProfileInfo_v3`.
pub const CI_PROFILE_INFO_V3: c_uint =
    struct_version(std::mem::size_of::<NvmlComputeInstanceProfileInfoV3>(), 3);

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn layouts_match_nvml_h() {
        assert_eq!(size_of::<NvmlDeviceAttributes>(), 40);
        assert_eq!(offset_of!(NvmlDeviceAttributes, memory_size_mb), 32);
        assert_eq!(size_of::<NvmlGpuInstanceProfileInfo>(), 48);
        assert_eq!(offset_of!(NvmlGpuInstanceProfileInfo, memory_size_mb), 40);
        assert_eq!(size_of::<NvmlGpuInstanceProfileInfoV2>(), 152);
        assert_eq!(offset_of!(NvmlGpuInstanceProfileInfoV2, id), 4);
        assert_eq!(offset_of!(NvmlGpuInstanceProfileInfoV2, memory_size_mb), 48);
        assert_eq!(offset_of!(NvmlGpuInstanceProfileInfoV2, name), 56);
        assert_eq!(size_of::<NvmlGpuInstanceProfileInfoV3>(), 152);
        assert_eq!(offset_of!(NvmlGpuInstanceProfileInfoV3, id), 4);
        assert_eq!(offset_of!(NvmlGpuInstanceProfileInfoV3, memory_size_mb), 40);
        assert_eq!(offset_of!(NvmlGpuInstanceProfileInfoV3, capabilities), 144);
        assert_eq!(size_of::<NvmlGpuInstanceInfo>(), 24);
        assert_eq!(offset_of!(NvmlGpuInstanceInfo, placement), 16);
        assert_eq!(size_of::<NvmlComputeInstanceProfileInfo>(), 36);
        assert_eq!(size_of::<NvmlComputeInstanceProfileInfoV3>(), 140);
        assert_eq!(offset_of!(NvmlComputeInstanceProfileInfoV3, body), 4);
        assert_eq!(offset_of!(NvmlComputeInstanceProfileInfoV3, name), 40);
        assert_eq!(size_of::<NvmlComputeInstanceInfo>(), 32);
        assert_eq!(offset_of!(NvmlComputeInstanceInfo, placement), 24);
        assert_eq!(GI_PROFILE_INFO_V2, 0x0200_0098);
        assert_eq!(GI_PROFILE_INFO_V3, 0x0300_0098);
        assert_eq!(CI_PROFILE_INFO_V2, 0x0200_0088);
        assert_eq!(CI_PROFILE_INFO_V3, 0x0300_008c);
    }
}
