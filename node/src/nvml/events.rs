//! NVML events: the device plugin's health monitor waits here for critical Xids and ECC errors.
//!
//! Mirrors what NVIDIA's k8s-device-plugin does through go-nvml (`internal/rm/health.go`):
//! `nvmlEventSetCreate`, `nvmlDeviceGetSupportedEventTypes`, `nvmlDeviceRegisterEvents` with the
//! wanted mask limited to the supported one, then `nvmlEventSetWait_v2` with a timeout. The
//! wait is a blocking C call, so callers run it on a dedicated thread.

use std::os::raw::c_uint;
use std::time::Duration;

use super::ffi::{self, EventData, EventSetHandle, NvmlDevice};
use super::{Device, Nvml};
use crate::error::NodeError;

/// `nvmlEventTypeSingleBitEccError`.
pub const EVENT_SINGLE_BIT_ECC: u64 = 0x1;
/// `nvmlEventTypeDoubleBitEccError`.
pub const EVENT_DOUBLE_BIT_ECC: u64 = 0x2;
/// `nvmlEventTypeXidCriticalError`.
pub const EVENT_XID_CRITICAL: u64 = 0x8;
/// `NVML_ERROR_GPU_IS_LOST`, the code of a GPU that fell off the bus.
pub const ERROR_GPU_IS_LOST: u32 = ffi::ERROR_GPU_IS_LOST;

/// `gpuInstanceId`/`computeInstanceId` of an event that no MIG instance is blamed for.
const NO_INSTANCE: c_uint = 0xFFFF_FFFF;

/// One event, with the device resolved to its UUID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// UUID of the (physical) GPU the event is about; `None` when NVML could not name it.
    pub gpu_uuid: Option<String>,
    /// `nvmlEventType*` bit.
    pub event_type: u64,
    /// The Xid for `EVENT_XID_CRITICAL` (999: unknown Xid), else 0.
    pub data: u64,
    /// GPU instance id, when a MIG GPU instance is to blame.
    pub gpu_instance: Option<u32>,
    /// Compute instance id, when a MIG compute instance is to blame.
    pub compute_instance: Option<u32>,
}

/// An NVML event set; freed on drop. Not `Send`: create it on the thread that waits.
#[derive(Debug)]
pub struct EventSet<'a> {
    nvml: &'a Nvml,
    handle: EventSetHandle,
}

impl Nvml {
    /// `nvmlEventSetCreate`.
    pub fn event_set(&self) -> Result<EventSet<'_>, NodeError> {
        let call = "nvmlEventSetCreate";
        let f = self
            .fns
            .event_set_create
            .ok_or_else(|| self.missing(call))?;
        if self.fns.event_set_wait_v2.is_none() || self.fns.device_register_events.is_none() {
            return Err(self.missing("nvmlEventSetWait_v2"));
        }
        let mut handle: EventSetHandle = std::ptr::null_mut();
        // SAFETY: handle is a valid out-pointer.
        let rc = unsafe { f(&mut handle) };
        self.check(rc, call, None)?;
        Ok(EventSet { nvml: self, handle })
    }
}

impl Device<'_> {
    /// `nvmlDeviceGetSupportedEventTypes`.
    pub fn supported_event_types(&self) -> Result<u64, NodeError> {
        let call = "nvmlDeviceGetSupportedEventTypes";
        let f = self
            .nvml
            .fns
            .device_get_supported_event_types
            .ok_or_else(|| self.nvml.missing(call))?;
        let mut mask = 0;
        // SAFETY: handle came from NVML and mask is a valid out-pointer.
        let rc = unsafe { f(self.handle, &mut mask) };
        self.nvml.check(rc, call, Some(&self.label))?;
        Ok(mask)
    }
}

impl EventSet<'_> {
    /// Registers `device` for the bits of `wanted` it supports; returns the registered mask.
    pub fn register(&self, device: &Device<'_>, wanted: u64) -> Result<u64, NodeError> {
        let call = "nvmlDeviceRegisterEvents";
        let f = self
            .nvml
            .fns
            .device_register_events
            .ok_or_else(|| self.nvml.missing(call))?;
        let mask = wanted & device.supported_event_types()?;
        // SAFETY: both handles came from this NVML.
        let rc = unsafe { f(device.handle, mask, self.handle) };
        self.nvml.check(rc, call, Some(&device.label))?;
        Ok(mask)
    }

    /// `nvmlEventSetWait_v2`: the next event, or `Ok(None)` after `timeout` without one.
    pub fn wait(&self, timeout: Duration) -> Result<Option<Event>, NodeError> {
        let call = "nvmlEventSetWait_v2";
        let f = self
            .nvml
            .fns
            .event_set_wait_v2
            .ok_or_else(|| self.nvml.missing(call))?;
        let ms = c_uint::try_from(timeout.as_millis()).unwrap_or(c_uint::MAX);
        let mut data = EventData {
            device: std::ptr::null_mut(),
            event_type: 0,
            event_data: 0,
            gpu_instance_id: NO_INSTANCE,
            compute_instance_id: NO_INSTANCE,
        };
        // SAFETY: the set came from this NVML and data is a valid nvmlEventData_t.
        let rc = unsafe { f(self.handle, &mut data, ms) };
        if rc == ffi::ERROR_TIMEOUT {
            return Ok(None);
        }
        self.nvml.check(rc, call, None)?;
        let id = |v: c_uint| (v != NO_INSTANCE).then_some(v);
        Ok(Some(Event {
            gpu_uuid: self.uuid_of(data.device),
            event_type: data.event_type,
            data: data.event_data,
            gpu_instance: id(data.gpu_instance_id),
            compute_instance: id(data.compute_instance_id),
        }))
    }

    fn uuid_of(&self, handle: NvmlDevice) -> Option<String> {
        if handle.is_null() {
            return None;
        }
        let device = Device {
            nvml: self.nvml,
            handle,
            label: "event device".into(),
        };
        device.uuid().ok()
    }
}

impl Drop for EventSet<'_> {
    fn drop(&mut self) {
        if let Some(f) = self.nvml.fns.event_set_free {
            // SAFETY: the set came from this NVML and is freed exactly once.
            let rc = unsafe { f(self.handle) };
            if rc != ffi::SUCCESS {
                tracing::debug!(code = rc, "nvmlEventSetFree failed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    /// `nvml.h` `nvmlEventData_t` on LP64: pointer, two `unsigned long long`, two `unsigned int`.
    #[test]
    fn event_data_layout_matches_nvml_h() {
        assert_eq!(size_of::<EventData>(), 32);
        assert_eq!(offset_of!(EventData, event_type), 8);
        assert_eq!(offset_of!(EventData, event_data), 16);
        assert_eq!(offset_of!(EventData, gpu_instance_id), 24);
        assert_eq!(offset_of!(EventData, compute_instance_id), 28);
    }
}
