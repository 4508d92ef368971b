//! The slice of NVML's C ABI that gpuhook uses, resolved once when the library is loaded.
//!
//! Signatures, struct layouts and enum values follow `nvml.h` (as mirrored by the
//! nvml-wrapper-sys bindings). Only the functions every driver since R450 has are required; the
//! rest are optional so that an older or stripped-down library still yields what it can.

use std::os::raw::{c_char, c_int, c_uint, c_ulonglong, c_void};

pub type NvmlReturn = c_uint;
pub type NvmlDevice = *mut c_void;

pub const SUCCESS: NvmlReturn = 0;
pub const ERROR_INVALID_ARGUMENT: NvmlReturn = 2;
pub const ERROR_NOT_SUPPORTED: NvmlReturn = 3;
pub const ERROR_NOT_FOUND: NvmlReturn = 6;
pub const ERROR_TIMEOUT: NvmlReturn = 10;
pub const ERROR_FUNCTION_NOT_FOUND: NvmlReturn = 13;
pub const ERROR_GPU_IS_LOST: NvmlReturn = 15;

/// `nvmlEventSet_t`: an opaque handle.
pub type EventSetHandle = *mut c_void;

/// `nvmlEventData_t` as `nvml.h` declares it since R450 (the GI/CI ids were added for MIG;
/// `0xFFFFFFFF` when the event is not attributable to a MIG instance).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct EventData {
    pub device: NvmlDevice,
    pub event_type: c_ulonglong,
    pub event_data: c_ulonglong,
    pub gpu_instance_id: c_uint,
    pub compute_instance_id: c_uint,
}

pub const DRIVER_VERSION_BUFFER: usize = 80;
pub const UUID_BUFFER: usize = 96;
pub const NAME_BUFFER: usize = 96;

/// `nvmlPciInfo_t` (v3).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PciInfo {
    pub bus_id_legacy: [c_char; 16],
    pub domain: c_uint,
    pub bus: c_uint,
    pub device: c_uint,
    pub pci_device_id: c_uint,
    pub pci_sub_system_id: c_uint,
    pub bus_id: [c_char; 32],
}

/// `nvmlMemory_t` (v1).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Memory {
    pub total: c_ulonglong,
    pub free: c_ulonglong,
    pub used: c_ulonglong,
}

type FnVoid = unsafe extern "C" fn() -> NvmlReturn;
type FnErrorString = unsafe extern "C" fn(NvmlReturn) -> *const c_char;
type FnStrBuf = unsafe extern "C" fn(*mut c_char, c_uint) -> NvmlReturn;
type FnOutInt = unsafe extern "C" fn(*mut c_int) -> NvmlReturn;
type FnOutUint = unsafe extern "C" fn(*mut c_uint) -> NvmlReturn;
type FnHandleByIndex = unsafe extern "C" fn(c_uint, *mut NvmlDevice) -> NvmlReturn;
type FnHandleByUuid = unsafe extern "C" fn(*const c_char, *mut NvmlDevice) -> NvmlReturn;
type FnDevStrBuf = unsafe extern "C" fn(NvmlDevice, *mut c_char, c_uint) -> NvmlReturn;
type FnDevOutUint = unsafe extern "C" fn(NvmlDevice, *mut c_uint) -> NvmlReturn;
type FnDevTwoUint = unsafe extern "C" fn(NvmlDevice, *mut c_uint, *mut c_uint) -> NvmlReturn;
type FnDevTwoInt = unsafe extern "C" fn(NvmlDevice, *mut c_int, *mut c_int) -> NvmlReturn;
type FnDevPci = unsafe extern "C" fn(NvmlDevice, *mut PciInfo) -> NvmlReturn;
type FnDevMemory = unsafe extern "C" fn(NvmlDevice, *mut Memory) -> NvmlReturn;
type FnDevMigByIndex = unsafe extern "C" fn(NvmlDevice, c_uint, *mut NvmlDevice) -> NvmlReturn;
type FnDevSetUint = unsafe extern "C" fn(NvmlDevice, c_uint) -> NvmlReturn;
type FnEventSetCreate = unsafe extern "C" fn(*mut EventSetHandle) -> NvmlReturn;
type FnEventSetFree = unsafe extern "C" fn(EventSetHandle) -> NvmlReturn;
type FnEventSetWait = unsafe extern "C" fn(EventSetHandle, *mut EventData, c_uint) -> NvmlReturn;
type FnDevOutU64 = unsafe extern "C" fn(NvmlDevice, *mut c_ulonglong) -> NvmlReturn;
type FnDevRegister = unsafe extern "C" fn(NvmlDevice, c_ulonglong, EventSetHandle) -> NvmlReturn;
type FnDevPair = unsafe extern "C" fn(NvmlDevice, NvmlDevice, *mut c_uint) -> NvmlReturn;
type FnDevLinkUint = unsafe extern "C" fn(NvmlDevice, c_uint, *mut c_uint) -> NvmlReturn;
type FnDevLinkPci = unsafe extern "C" fn(NvmlDevice, c_uint, *mut PciInfo) -> NvmlReturn;

/// Resolved entry points. Plain function pointers: valid as long as the `Library` they came
/// from stays loaded, which [`super::Nvml`] guarantees by owning both.
#[derive(Debug, Clone, Copy)]
pub struct Fns {
    pub init_v2: FnVoid,
    pub shutdown: FnVoid,
    pub error_string: Option<FnErrorString>,
    pub system_get_driver_version: FnStrBuf,
    pub system_get_cuda_driver_version_v2: Option<FnOutInt>,
    pub system_get_cuda_driver_version: Option<FnOutInt>,
    pub device_get_count_v2: FnOutUint,
    pub device_get_handle_by_index_v2: FnHandleByIndex,
    pub device_get_handle_by_uuid: Option<FnHandleByUuid>,
    pub device_get_uuid: FnDevStrBuf,
    pub device_get_name: FnDevStrBuf,
    pub device_get_minor_number: FnDevOutUint,
    pub device_get_pci_info_v3: Option<FnDevPci>,
    pub device_get_memory_info: Option<FnDevMemory>,
    pub device_get_brand: Option<FnDevOutUint>,
    pub device_get_architecture: Option<FnDevOutUint>,
    pub device_get_cuda_compute_capability: Option<FnDevTwoInt>,
    pub device_get_mig_mode: Option<FnDevTwoUint>,
    pub device_get_max_mig_device_count: Option<FnDevOutUint>,
    pub device_get_mig_device_handle_by_index: Option<FnDevMigByIndex>,
    pub device_get_gpu_instance_id: Option<FnDevOutUint>,
    pub device_get_compute_instance_id: Option<FnDevOutUint>,
    pub device_get_compute_mode: Option<FnDevOutUint>,
    pub device_set_compute_mode: Option<FnDevSetUint>,
    pub event_set_create: Option<FnEventSetCreate>,
    pub event_set_free: Option<FnEventSetFree>,
    pub event_set_wait_v2: Option<FnEventSetWait>,
    pub device_get_supported_event_types: Option<FnDevOutU64>,
    pub device_register_events: Option<FnDevRegister>,
    pub device_get_topology_common_ancestor: Option<FnDevPair>,
    pub device_get_nvlink_state: Option<FnDevLinkUint>,
    pub device_get_nvlink_remote_pci_info_v2: Option<FnDevLinkPci>,
    pub device_get_nvlink_remote_device_type: Option<FnDevLinkUint>,
    /// Telemetry (`gpuhook-exporter`): its own table, see `metrics_ffi.rs`.
    pub metrics: super::metrics_ffi::MetricFns,
}

/// Looks one symbol up by its NUL-terminated name (no copy is made); `None` when the library
/// does not export it.
///
/// # Safety
/// `T` must be the exact C signature of the symbol `name_nul`.
unsafe fn sym<T: Copy>(lib: &libloading::Library, name_nul: &[u8]) -> Option<T> {
    // SAFETY: the caller guarantees `T` matches the symbol's C type.
    unsafe { lib.get::<T>(name_nul).ok().map(|s| *s) }
}

impl Fns {
    /// Resolves every entry point; `Err(name)` names the first missing required one.
    pub fn load(lib: &libloading::Library) -> Result<Fns, &'static str> {
        macro_rules! req {
            ($name:literal) => {
                // SAFETY: the field's type is the C signature of `$name` from nvml.h.
                unsafe { sym(lib, concat!($name, "\0").as_bytes()) }.ok_or($name)?
            };
        }
        macro_rules! opt {
            ($name:literal) => {
                // SAFETY: the field's type is the C signature of `$name` from nvml.h.
                unsafe { sym(lib, concat!($name, "\0").as_bytes()) }
            };
        }
        Ok(Fns {
            init_v2: req!("nvmlInit_v2"),
            shutdown: req!("nvmlShutdown"),
            error_string: opt!("nvmlErrorString"),
            system_get_driver_version: req!("nvmlSystemGetDriverVersion"),
            system_get_cuda_driver_version_v2: opt!("nvmlSystemGetCudaDriverVersion_v2"),
            system_get_cuda_driver_version: opt!("nvmlSystemGetCudaDriverVersion"),
            device_get_count_v2: req!("nvmlDeviceGetCount_v2"),
            device_get_handle_by_index_v2: req!("nvmlDeviceGetHandleByIndex_v2"),
            device_get_handle_by_uuid: opt!("nvmlDeviceGetHandleByUUID"),
            device_get_uuid: req!("nvmlDeviceGetUUID"),
            device_get_name: req!("nvmlDeviceGetName"),
            device_get_minor_number: req!("nvmlDeviceGetMinorNumber"),
            device_get_pci_info_v3: opt!("nvmlDeviceGetPciInfo_v3"),
            device_get_memory_info: opt!("nvmlDeviceGetMemoryInfo"),
            device_get_brand: opt!("nvmlDeviceGetBrand"),
            device_get_architecture: opt!("nvmlDeviceGetArchitecture"),
            device_get_cuda_compute_capability: opt!("nvmlDeviceGetCudaComputeCapability"),
            device_get_mig_mode: opt!("nvmlDeviceGetMigMode"),
            device_get_max_mig_device_count: opt!("nvmlDeviceGetMaxMigDeviceCount"),
            device_get_mig_device_handle_by_index: opt!("nvmlDeviceGetMigDeviceHandleByIndex"),
            device_get_gpu_instance_id: opt!("nvmlDeviceGetGpuInstanceId"),
            device_get_compute_instance_id: opt!("nvmlDeviceGetComputeInstanceId"),
            device_get_compute_mode: opt!("nvmlDeviceGetComputeMode"),
            device_set_compute_mode: opt!("nvmlDeviceSetComputeMode"),
            event_set_create: opt!("nvmlEventSetCreate"),
            event_set_free: opt!("nvmlEventSetFree"),
            event_set_wait_v2: opt!("nvmlEventSetWait_v2"),
            device_get_supported_event_types: opt!("nvmlDeviceGetSupportedEventTypes"),
            device_register_events: opt!("nvmlDeviceRegisterEvents"),
            device_get_topology_common_ancestor: opt!("nvmlDeviceGetTopologyCommonAncestor"),
            device_get_nvlink_state: opt!("nvmlDeviceGetNvLinkState"),
            device_get_nvlink_remote_pci_info_v2: opt!("nvmlDeviceGetNvLinkRemotePciInfo_v2"),
            device_get_nvlink_remote_device_type: opt!("nvmlDeviceGetNvLinkRemoteDeviceType"),
            metrics: super::metrics_ffi::MetricFns::load(lib),
        })
    }
}

/// NVML brand enum -> the lower-case name `NVIDIA_REQUIRE_*` `brand=` compares against.
pub fn brand_name(brand: c_uint) -> Option<&'static str> {
    Some(match brand {
        1 => "quadro",
        2 => "tesla",
        3 => "nvs",
        4 => "grid",
        5 => "geforce",
        6 => "titan",
        7 => "nvidiavapps",
        8 => "nvidiavpc",
        9 => "nvidiavcs",
        10 => "nvidiavws",
        11 => "nvidiacloudgaming",
        12 => "quadrortx",
        13 => "nvidiartx",
        14 => "nvidia",
        15 => "geforcertx",
        16 => "titanrtx",
        _ => return None,
    })
}

/// NVML architecture enum -> lower-case name.
pub fn architecture_name(arch: c_uint) -> Option<&'static str> {
    Some(match arch {
        2 => "kepler",
        3 => "maxwell",
        4 => "pascal",
        5 => "volta",
        6 => "turing",
        7 => "ampere",
        8 => "ada",
        9 => "hopper",
        10 => "blackwell",
        11 => "orin",
        _ => return None,
    })
}
