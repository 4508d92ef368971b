//! NVML's C types, constants and struct layouts, as declared in `nvml.h`.
//!
//! Consumers (libnvidia-container, go-nvml, nvml-wrapper) are compiled against the real header,
//! so every value here must match it bit for bit: return codes, enum values, buffer sizes and
//! `#[repr(C)]` layouts (checked by the layout tests at the bottom).

use std::os::raw::{c_char, c_uint, c_ulonglong};

/// `nvmlReturn_t`.
pub type NvmlReturn = c_uint;

/// `nvmlDevice_t`: an opaque pointer. Ours point at entries of the leaked device table.
pub type NvmlDevice = *mut NvmlDeviceSt;

/// The opaque `struct nvmlDevice_st`; never dereferenced through a caller's pointer.
#[repr(C)]
#[derive(Debug)]
pub struct NvmlDeviceSt {
    _private: [u8; 0],
}

pub const NVML_SUCCESS: NvmlReturn = 0;
pub const NVML_ERROR_UNINITIALIZED: NvmlReturn = 1;
pub const NVML_ERROR_INVALID_ARGUMENT: NvmlReturn = 2;
pub const NVML_ERROR_NOT_SUPPORTED: NvmlReturn = 3;
pub const NVML_ERROR_NO_PERMISSION: NvmlReturn = 4;
pub const NVML_ERROR_NOT_FOUND: NvmlReturn = 6;
pub const NVML_ERROR_INSUFFICIENT_SIZE: NvmlReturn = 7;
pub const NVML_ERROR_DRIVER_NOT_LOADED: NvmlReturn = 9;
pub const NVML_ERROR_TIMEOUT: NvmlReturn = 10;
pub const NVML_ERROR_GPU_IS_LOST: NvmlReturn = 15;
pub const NVML_ERROR_ARGUMENT_VERSION_MISMATCH: NvmlReturn = 25;
pub const NVML_ERROR_UNKNOWN: NvmlReturn = 999;

pub const NVML_DEVICE_MIG_DISABLE: c_uint = 0;
pub const NVML_DEVICE_MIG_ENABLE: c_uint = 1;

/// `nvmlComputeMode_t` values; `NVML_COMPUTEMODE_COUNT` is the first invalid one.
pub const NVML_COMPUTEMODE_DEFAULT: c_uint = 0;
pub const NVML_COMPUTEMODE_COUNT: c_uint = 4;

/// `nvmlDeviceArchitecture_t` values.
pub const NVML_DEVICE_ARCH_KEPLER: c_uint = 2;
pub const NVML_DEVICE_ARCH_MAXWELL: c_uint = 3;
pub const NVML_DEVICE_ARCH_PASCAL: c_uint = 4;
pub const NVML_DEVICE_ARCH_VOLTA: c_uint = 5;
pub const NVML_DEVICE_ARCH_TURING: c_uint = 6;
pub const NVML_DEVICE_ARCH_AMPERE: c_uint = 7;
pub const NVML_DEVICE_ARCH_ADA: c_uint = 8;
pub const NVML_DEVICE_ARCH_HOPPER: c_uint = 9;
pub const NVML_DEVICE_ARCH_BLACKWELL: c_uint = 10;
pub const NVML_DEVICE_ARCH_T23X: c_uint = 11;

/// `nvmlBrandType_t` values, in `nvml.h` order (`NVML_BRAND_UNKNOWN` = 0 ... `TITAN_RTX` = 16).
pub const BRANDS: &[(&str, c_uint)] = &[
    ("unknown", 0),
    ("quadro", 1),
    ("tesla", 2),
    ("nvs", 3),
    ("grid", 4),
    ("geforce", 5),
    ("titan", 6),
    ("nvidia_vapps", 7),
    ("nvidia_vpc", 8),
    ("nvidia_vcs", 9),
    ("nvidia_vws", 10),
    ("nvidia_cloud_gaming", 11),
    ("nvidia_vgaming", 11),
    ("quadro_rtx", 12),
    ("nvidia_rtx", 13),
    ("nvidia", 14),
    ("geforce_rtx", 15),
    ("titan_rtx", 16),
];

/// Buffer sizes from `nvml.h` (the `_V2_` ones are what current consumers pass).
pub const NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE: usize = 32;
pub const NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE: usize = 16;

/// `nvmlPciInfo_t` as used by `nvmlDeviceGetPciInfo_v2` / `_v3` (68 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct NvmlPciInfo {
    /// `%04X:%02X:%02X.0`, the legacy 4-digit-domain form.
    pub bus_id_legacy: [c_char; NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE],
    pub domain: c_uint,
    pub bus: c_uint,
    pub device: c_uint,
    /// `(device id << 16) | vendor id`.
    pub pci_device_id: c_uint,
    pub pci_sub_system_id: c_uint,
    /// `%08X:%02X:%02X.0`.
    pub bus_id: [c_char; NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE],
}

/// The original `nvmlPciInfo_t` of `nvmlDeviceGetPciInfo` (v1, 52 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct NvmlPciInfoV1 {
    pub bus_id: [c_char; NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE],
    pub domain: c_uint,
    pub bus: c_uint,
    pub device: c_uint,
    pub pci_device_id: c_uint,
    pub pci_sub_system_id: c_uint,
    pub reserved: [c_uint; 4],
}

/// `nvmlMemory_t` (v1).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct NvmlMemory {
    pub total: c_ulonglong,
    pub free: c_ulonglong,
    pub used: c_ulonglong,
}

/// `nvmlMemory_v2_t`; the caller sets `version` to [`NVML_MEMORY_V2_VERSION`].
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct NvmlMemoryV2 {
    pub version: c_uint,
    pub total: c_ulonglong,
    pub reserved: c_ulonglong,
    pub free: c_ulonglong,
    pub used: c_ulonglong,
}

/// `NVML_STRUCT_VERSION(Memory, 2)` = `sizeof(nvmlMemory_v2_t) | (2 << 24)`.
pub const NVML_MEMORY_V2_VERSION: c_uint = struct_version(std::mem::size_of::<NvmlMemoryV2>(), 2);

/// `nvmlEventType*` bits (`nvml.h`, "Event Types").
pub const EVENT_SINGLE_BIT_ECC: u64 = 0x1;
pub const EVENT_DOUBLE_BIT_ECC: u64 = 0x2;
pub const EVENT_PSTATE: u64 = 0x4;
pub const EVENT_XID_CRITICAL: u64 = 0x8;

/// `gpuInstanceId`/`computeInstanceId` of an event not attributable to a MIG instance.
pub const NO_INSTANCE: c_uint = 0xFFFF_FFFF;

/// `nvmlEventData_t` (current `nvml.h`: the two instance ids were added with MIG).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct NvmlEventData {
    pub device: NvmlDevice,
    pub event_type: c_ulonglong,
    pub event_data: c_ulonglong,
    pub gpu_instance_id: c_uint,
    pub compute_instance_id: c_uint,
}

/// The opaque `struct nvmlEventSet_st`; our handles are ids, never dereferenced.
#[repr(C)]
#[derive(Debug)]
pub struct NvmlEventSetSt {
    _private: [u8; 0],
}

/// `nvmlEventSet_t`.
pub type NvmlEventSet = *mut NvmlEventSetSt;

/// `nvmlGpuTopologyLevel_t` values we report (INTERNAL 0, SINGLE 10, MULTIPLE 20, HOSTBRIDGE 30).
pub const TOPOLOGY_NODE: c_uint = 40;
pub const TOPOLOGY_SYSTEM: c_uint = 50;

/// `NVML_NVLINK_MAX_LINKS` (18 since Hopper).
pub const NVLINK_MAX_LINKS: c_uint = 18;
/// `nvmlIntNvLinkDeviceType_t`: `NVML_NVLINK_DEVICE_TYPE_SWITCH`.
pub const NVLINK_DEVICE_TYPE_SWITCH: c_uint = 2;

/// `nvmlErrorString` texts, NUL-terminated so they can be handed out as `const char *`.
pub fn error_string(code: NvmlReturn) -> &'static [u8] {
    match code {
        0 => b"Success\0",
        1 => b"Uninitialized\0",
        2 => b"Invalid Argument\0",
        3 => b"Not Supported\0",
        4 => b"Insufficient Permissions\0",
        5 => b"Already Initialized\0",
        6 => b"Not Found\0",
        7 => b"Insufficient Size\0",
        8 => b"Insufficient External Power\0",
        9 => b"Driver Not Loaded\0",
        10 => b"Timeout\0",
        11 => b"Interrupt Request Issue\0",
        12 => b"NVML Shared Library Not Found\0",
        13 => b"Function Not Found\0",
        14 => b"Corrupted infoROM\0",
        15 => b"GPU is lost\0",
        16 => b"GPU requires restart\0",
        17 => b"The operating system has blocked the request.\0",
        18 => b"RM has detected an NVML/RM version mismatch.\0",
        19 => b"In use by another client\0",
        20 => b"Insufficient Memory\0",
        21 => b"No data\0",
        22 => b"The requested vgpu operation is not available on target device, because ECC is enabled\0",
        23 => b"Insufficient resources\0",
        24 => b"Frequency not supported\0",
        25 => b"Argument version mismatch\0",
        26 => b"Deprecated\0",
        27 => b"Not Ready\0",
        28 => b"GPU not found\0",
        29 => b"Invalid state\0",
        _ => b"Unknown Error\0",
    }
}

/// `NVML_STRUCT_VERSION(name, ver)` = `sizeof(struct) | ver << 24`.
// Struct sizes are far below 2^24, so the truncating cast is exact (a `const fn` cannot try_from).
#[allow(clippy::cast_possible_truncation)]
pub const fn struct_version(size: usize, ver: c_uint) -> c_uint {
    size as c_uint | (ver << 24)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn layouts_match_nvml_h() {
        assert_eq!(size_of::<NvmlPciInfo>(), 68);
        assert_eq!(offset_of!(NvmlPciInfo, domain), 16);
        assert_eq!(offset_of!(NvmlPciInfo, pci_sub_system_id), 32);
        assert_eq!(offset_of!(NvmlPciInfo, bus_id), 36);
        assert_eq!(size_of::<NvmlPciInfoV1>(), 52);
        assert_eq!(size_of::<NvmlMemory>(), 24);
        assert_eq!(size_of::<NvmlMemoryV2>(), 40);
        assert_eq!(offset_of!(NvmlMemoryV2, total), 8);
        assert_eq!(NVML_MEMORY_V2_VERSION, 0x0200_0028);
        assert_eq!(size_of::<NvmlEventData>(), 32);
        assert_eq!(offset_of!(NvmlEventData, event_data), 16);
        assert_eq!(offset_of!(NvmlEventData, gpu_instance_id), 24);
        assert_eq!(offset_of!(NvmlEventData, compute_instance_id), 28);
    }

    #[test]
    fn error_strings_are_nul_terminated() {
        for code in (0..=30).chain([999, 12345]) {
            let s = error_string(code);
            assert_eq!(s.last(), Some(&0));
            assert_eq!(s.iter().filter(|b| **b == 0).count(), 1);
        }
        assert_eq!(error_string(999), b"Unknown Error\0");
    }
}
