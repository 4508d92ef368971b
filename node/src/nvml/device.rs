//! A GPU or MIG device handle borrowed from a loaded [`Nvml`].

use std::os::raw::{c_char, c_int, c_uint};

use super::ffi::{self, NvmlDevice};
use super::{c_buf_to_string, ComputeMode, Nvml};
use crate::error::NodeError;

/// A device handle; valid while the [`Nvml`] it came from is alive.
#[derive(Debug)]
pub struct Device<'a> {
    pub(super) nvml: &'a Nvml,
    pub(super) handle: NvmlDevice,
    /// `GPU 3`, `GPU 0 MIG 2` or the UUID, for error messages.
    pub(super) label: String,
}

impl<'a> Device<'a> {
    fn check(&self, rc: ffi::NvmlReturn, call: &'static str) -> Result<(), NodeError> {
        self.nvml.check(rc, call, Some(&self.label))
    }

    fn uint(
        &self,
        f: Option<unsafe extern "C" fn(NvmlDevice, *mut c_uint) -> ffi::NvmlReturn>,
        call: &'static str,
    ) -> Result<u32, NodeError> {
        let f = f.ok_or_else(|| self.nvml.missing(call))?;
        let mut v = 0;
        // SAFETY: handle came from NVML and v is a valid out-pointer.
        let rc = unsafe { f(self.handle, &mut v) };
        self.check(rc, call)?;
        Ok(v)
    }

    fn string<const N: usize>(
        &self,
        f: unsafe extern "C" fn(NvmlDevice, *mut c_char, c_uint) -> ffi::NvmlReturn,
        call: &'static str,
    ) -> Result<String, NodeError> {
        let mut buf = [0 as c_char; N];
        // SAFETY: buf is writable for the length we pass.
        let rc = unsafe {
            f(
                self.handle,
                buf.as_mut_ptr(),
                c_uint::try_from(N).unwrap_or(c_uint::MAX),
            )
        };
        self.check(rc, call)?;
        Ok(c_buf_to_string(&buf))
    }

    /// `GPU-...` or `MIG-...`.
    pub fn uuid(&self) -> Result<String, NodeError> {
        self.string::<{ ffi::UUID_BUFFER }>(self.nvml.fns.device_get_uuid, "nvmlDeviceGetUUID")
    }

    /// e.g. `NVIDIA A100-SXM4-80GB`, or `NVIDIA A100-SXM4-80GB MIG 1g.10gb` for a MIG device.
    pub fn name(&self) -> Result<String, NodeError> {
        self.string::<{ ffi::NAME_BUFFER }>(self.nvml.fns.device_get_name, "nvmlDeviceGetName")
    }

    /// Minor of `/dev/nvidia<minor>`.
    pub fn minor_number(&self) -> Result<u32, NodeError> {
        self.uint(
            Some(self.nvml.fns.device_get_minor_number),
            "nvmlDeviceGetMinorNumber",
        )
    }

    /// PCI bus id in NVML form, lower case (`00000000:07:00.0`).
    pub fn pci_bus_id(&self) -> Result<String, NodeError> {
        let call = "nvmlDeviceGetPciInfo_v3";
        let f = self
            .nvml
            .fns
            .device_get_pci_info_v3
            .ok_or_else(|| self.nvml.missing(call))?;
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
        let rc = unsafe { f(self.handle, &mut info) };
        self.check(rc, call)?;
        let id = c_buf_to_string(&info.bus_id);
        Ok(crate::procfs::normalize_bus_id(&id).unwrap_or_else(|| id.to_ascii_lowercase()))
    }

    /// Total memory in bytes.
    pub fn memory_total(&self) -> Result<u64, NodeError> {
        let call = "nvmlDeviceGetMemoryInfo";
        let f = self
            .nvml
            .fns
            .device_get_memory_info
            .ok_or_else(|| self.nvml.missing(call))?;
        let mut mem = ffi::Memory::default();
        // SAFETY: mem is a valid nvmlMemory_t.
        let rc = unsafe { f(self.handle, &mut mem) };
        self.check(rc, call)?;
        Ok(mem.total)
    }

    /// Lower-case brand (`tesla`, `nvidia`, `geforce`, ...); `None` for unknown values.
    pub fn brand(&self) -> Result<Option<&'static str>, NodeError> {
        Ok(ffi::brand_name(self.uint(
            self.nvml.fns.device_get_brand,
            "nvmlDeviceGetBrand",
        )?))
    }

    /// Lower-case architecture (`ampere`, `hopper`, ...); `None` for unknown values.
    pub fn architecture(&self) -> Result<Option<&'static str>, NodeError> {
        Ok(ffi::architecture_name(self.uint(
            self.nvml.fns.device_get_architecture,
            "nvmlDeviceGetArchitecture",
        )?))
    }

    /// CUDA compute capability `(major, minor)`.
    pub fn cuda_compute_capability(&self) -> Result<(u32, u32), NodeError> {
        let call = "nvmlDeviceGetCudaComputeCapability";
        let f = self
            .nvml
            .fns
            .device_get_cuda_compute_capability
            .ok_or_else(|| self.nvml.missing(call))?;
        let (mut major, mut minor): (c_int, c_int) = (0, 0);
        // SAFETY: both are valid out-pointers.
        let rc = unsafe { f(self.handle, &mut major, &mut minor) };
        self.check(rc, call)?;
        let unsigned = |v: c_int| u32::try_from(v).unwrap_or(0);
        Ok((unsigned(major), unsigned(minor)))
    }

    /// Current MIG mode; `Ok(false)` where MIG is not supported.
    pub fn mig_enabled(&self) -> Result<bool, NodeError> {
        let call = "nvmlDeviceGetMigMode";
        let Some(f) = self.nvml.fns.device_get_mig_mode else {
            return Ok(false);
        };
        let (mut current, mut pending) = (0, 0);
        // SAFETY: both are valid out-pointers.
        let rc = unsafe { f(self.handle, &mut current, &mut pending) };
        if rc == ffi::ERROR_NOT_SUPPORTED {
            return Ok(false);
        }
        self.check(rc, call)?;
        Ok(current == 1)
    }

    /// Upper bound of MIG device indexes of this GPU.
    pub fn max_mig_device_count(&self) -> Result<u32, NodeError> {
        self.uint(
            self.nvml.fns.device_get_max_mig_device_count,
            "nvmlDeviceGetMaxMigDeviceCount",
        )
    }

    /// MIG device at `index`; `Ok(None)` for a gap (NOT_FOUND / INVALID_ARGUMENT).
    pub fn mig_device_by_index(&self, index: u32) -> Result<Option<Device<'a>>, NodeError> {
        let call = "nvmlDeviceGetMigDeviceHandleByIndex";
        let f = self
            .nvml
            .fns
            .device_get_mig_device_handle_by_index
            .ok_or_else(|| self.nvml.missing(call))?;
        let mut handle: NvmlDevice = std::ptr::null_mut();
        // SAFETY: handle is a valid out-pointer.
        let rc = unsafe { f(self.handle, index, &mut handle) };
        if rc == ffi::ERROR_NOT_FOUND || rc == ffi::ERROR_INVALID_ARGUMENT {
            return Ok(None);
        }
        self.check(rc, call)?;
        Ok(Some(Device {
            nvml: self.nvml,
            handle,
            label: format!("{} MIG {index}", self.label),
        }))
    }

    /// GPU instance id of a MIG device.
    pub fn gpu_instance_id(&self) -> Result<u32, NodeError> {
        self.uint(
            self.nvml.fns.device_get_gpu_instance_id,
            "nvmlDeviceGetGpuInstanceId",
        )
    }

    /// Compute instance id of a MIG device.
    pub fn compute_instance_id(&self) -> Result<u32, NodeError> {
        self.uint(
            self.nvml.fns.device_get_compute_instance_id,
            "nvmlDeviceGetComputeInstanceId",
        )
    }

    /// Current compute mode.
    pub fn compute_mode(&self) -> Result<ComputeMode, NodeError> {
        let call = "nvmlDeviceGetComputeMode";
        let v = self.uint(self.nvml.fns.device_get_compute_mode, call)?;
        ComputeMode::from_raw(v).ok_or_else(|| NodeError::Nvml {
            path: self.nvml.path.clone(),
            call,
            target: Some(self.label.clone()),
            code: 0,
            message: format!("unknown compute mode {v}"),
        })
    }

    /// Sets the compute mode.
    pub fn set_compute_mode(&self, mode: ComputeMode) -> Result<(), NodeError> {
        let call = "nvmlDeviceSetComputeMode";
        let f = self
            .nvml
            .fns
            .device_set_compute_mode
            .ok_or_else(|| self.nvml.missing(call))?;
        // SAFETY: handle came from NVML; the mode is a valid nvmlComputeMode_t.
        let rc = unsafe { f(self.handle, mode.to_raw()) };
        self.check(rc, call)
    }
}
