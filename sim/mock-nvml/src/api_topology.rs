//! Topology entry points, as NVIDIA's go-gpuallocator reads them for its best-effort policy
//! (`internal/links/device.go`: `GetTopologyCommonAncestor`, then per link `GetNvLinkState` and
//! `GetNvLinkRemotePciInfo`).
//!
//! The profile gives each GPU a NUMA node and a number of NVLinks to the node's NVSwitch fabric
//! (`numa_node`, `nvlinks`). On an NVSwitch system every NVLink ends at a switch, never at a
//! peer GPU, so the remote PCI info names a switch (one of four, link % 4, in PCI domain 1, where
//! no simulated GPU lives) and the remote device type is `NVML_NVLINK_DEVICE_TYPE_SWITCH`.
//! Links beyond the GPU's count are `NOT_SUPPORTED`, which is what go-gpuallocator skips.

use std::os::raw::c_uint;

use crate::api_device::with_device;
use crate::ffi::{self, NvmlDevice, NvmlPciInfo, NvmlReturn};
use crate::out::{fill_array, guard, put};
use crate::pci::PciAddr;
use crate::state;
use crate::table::Gpu;

/// Closest common PCIe ancestor: `NODE` within one NUMA node (or when NUMA is unknown),
/// `SYSTEM` across NUMA nodes.
///
/// # Safety
/// `path_info` must be null or valid for a write of an `nvmlGpuTopologyLevel_t`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTopologyCommonAncestor(
    device1: NvmlDevice,
    device2: NvmlDevice,
    path_info: *mut c_uint,
) -> NvmlReturn {
    guard(|| {
        let t = state::table()?;
        let a = t.resolve(device1)?.whole_gpu()?;
        let b = t.resolve(device2)?.whole_gpu()?;
        let level = match (a.numa_node, b.numa_node) {
            _ if a.index == b.index => 0,
            (Some(x), Some(y)) if x != y => ffi::TOPOLOGY_SYSTEM,
            _ => ffi::TOPOLOGY_NODE,
        };
        // SAFETY: forwarded caller contract.
        unsafe { put(path_info, level) }
    })
}

fn link_of(gpu: &Gpu, link: c_uint) -> Result<(), NvmlReturn> {
    if link >= ffi::NVLINK_MAX_LINKS {
        Err(ffi::NVML_ERROR_INVALID_ARGUMENT)
    } else if link >= gpu.nvlinks {
        Err(ffi::NVML_ERROR_NOT_SUPPORTED)
    } else {
        Ok(())
    }
}

/// `NVML_FEATURE_ENABLED` for each of the GPU's links.
///
/// # Safety
/// `is_active` must be null or valid for a write of an `nvmlEnableState_t`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetNvLinkState(
    device: NvmlDevice,
    link: c_uint,
    is_active: *mut c_uint,
) -> NvmlReturn {
    with_device(device, |_, d| {
        link_of(d.whole_gpu()?, link)?;
        // SAFETY: forwarded caller contract.
        unsafe { put(is_active, 1) }
    })
}

/// PCI info of the NVSwitch at the far end of `link`.
///
/// # Safety
/// `pci` must be null or valid for a write of an `nvmlPciInfo_t`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetNvLinkRemotePciInfo_v2(
    device: NvmlDevice,
    link: c_uint,
    pci: *mut NvmlPciInfo,
) -> NvmlReturn {
    with_device(device, |_, d| {
        link_of(d.whole_gpu()?, link)?;
        let switch = PciAddr {
            domain: 1,
            bus: link % 4,
            device: 0,
            function: 0,
        };
        let mut info = NvmlPciInfo {
            bus_id_legacy: [0; ffi::NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE],
            domain: switch.domain,
            bus: switch.bus,
            device: 0,
            pci_device_id: 0,
            pci_sub_system_id: 0,
            bus_id: [0; ffi::NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE],
        };
        fill_array(&mut info.bus_id_legacy, &switch.bus_id_legacy());
        fill_array(&mut info.bus_id, &switch.bus_id());
        // SAFETY: forwarded caller contract.
        unsafe { put(pci, info) }
    })
}

/// `NVML_NVLINK_DEVICE_TYPE_SWITCH` for every link (an NVSwitch fabric).
///
/// # Safety
/// `device_type` must be null or valid for a write of an `nvmlIntNvLinkDeviceType_t`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetNvLinkRemoteDeviceType(
    device: NvmlDevice,
    link: c_uint,
    device_type: *mut c_uint,
) -> NvmlReturn {
    with_device(device, |_, d| {
        link_of(d.whole_gpu()?, link)?;
        // SAFETY: forwarded caller contract.
        unsafe { put(device_type, ffi::NVLINK_DEVICE_TYPE_SWITCH) }
    })
}
