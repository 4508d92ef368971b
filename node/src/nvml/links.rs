//! Interconnect queries, the ones NVIDIA's go-gpuallocator makes for its best-effort policy
//! (`internal/links/device.go`: `GetTopologyCommonAncestor`; `GetNvLinkState` then
//! `GetNvLinkRemotePciInfo` for each of `NVML_NVLINK_MAX_LINKS` links, skipping
//! `NOT_SUPPORTED`), plus `nvmlDeviceGetNvLinkRemoteDeviceType` to recognise an NVSwitch.

use std::os::raw::c_uint;

use super::ffi;
use super::{c_buf_to_string, Device};
use crate::error::NodeError;

/// `NVML_NVLINK_MAX_LINKS` in current `nvml.h`.
pub const NVLINK_MAX_LINKS: u32 = 18;
/// `NVML_NVLINK_DEVICE_TYPE_SWITCH`.
const NVLINK_DEVICE_TYPE_SWITCH: c_uint = 2;

/// One active NVLink of a GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvLink {
    /// PCI bus id of the far end (a peer GPU or an NVSwitch), NVML form, lower case.
    pub remote_bus_id: String,
    /// The far end is an NVSwitch.
    pub remote_is_switch: bool,
}

impl Device<'_> {
    /// `nvmlDeviceGetTopologyCommonAncestor`: the raw `nvmlGpuTopologyLevel_t` (0 same board,
    /// 10/20 one/several PCIe switches, 30 host bridge, 40 same NUMA node, 50 across NUMA nodes).
    pub fn common_ancestor(&self, other: &Device<'_>) -> Result<u32, NodeError> {
        let call = "nvmlDeviceGetTopologyCommonAncestor";
        let f = self
            .nvml
            .fns
            .device_get_topology_common_ancestor
            .ok_or_else(|| self.nvml.missing(call))?;
        let mut level = 0;
        // SAFETY: both handles came from this NVML; level is a valid out-pointer.
        let rc = unsafe { f(self.handle, other.handle, &mut level) };
        self.nvml.check(rc, call, Some(&self.label))?;
        Ok(level)
    }

    /// The GPU's active NVLinks; empty when NVLink is not supported.
    pub fn nvlinks(&self) -> Result<Vec<NvLink>, NodeError> {
        let fns = &self.nvml.fns;
        let (Some(state), Some(remote)) = (
            fns.device_get_nvlink_state,
            fns.device_get_nvlink_remote_pci_info_v2,
        ) else {
            return Ok(Vec::new());
        };
        let mut links = Vec::new();
        for link in 0..NVLINK_MAX_LINKS {
            let mut active = 0;
            // SAFETY: handle came from NVML and active is a valid out-pointer.
            let rc = unsafe { state(self.handle, link, &mut active) };
            if rc == ffi::ERROR_NOT_SUPPORTED {
                continue;
            }
            if rc == ffi::ERROR_INVALID_ARGUMENT {
                break; // an older driver with fewer links
            }
            self.nvml
                .check(rc, "nvmlDeviceGetNvLinkState", Some(&self.label))?;
            if active != 1 {
                continue;
            }
            let mut info = ffi::PciInfo {
                bus_id_legacy: [0; 16],
                domain: 0,
                bus: 0,
                device: 0,
                pci_device_id: 0,
                pci_sub_system_id: 0,
                bus_id: [0; 32],
            };
            // SAFETY: info is a valid, correctly laid out nvmlPciInfo_t.
            let rc = unsafe { remote(self.handle, link, &mut info) };
            if rc == ffi::ERROR_NOT_SUPPORTED {
                continue;
            }
            let call = "nvmlDeviceGetNvLinkRemotePciInfo_v2";
            self.nvml.check(rc, call, Some(&self.label))?;
            let id = c_buf_to_string(&info.bus_id);
            links.push(NvLink {
                remote_bus_id: crate::procfs::normalize_bus_id(&id)
                    .unwrap_or_else(|| id.to_ascii_lowercase()),
                remote_is_switch: self.remote_is_switch(link),
            });
        }
        Ok(links)
    }

    fn remote_is_switch(&self, link: u32) -> bool {
        let Some(f) = self.nvml.fns.device_get_nvlink_remote_device_type else {
            return false;
        };
        let mut kind = 0;
        // SAFETY: handle came from NVML and kind is a valid out-pointer.
        let rc = unsafe { f(self.handle, link, &mut kind) };
        rc == ffi::SUCCESS && kind == NVLINK_DEVICE_TYPE_SWITCH
    }
}
