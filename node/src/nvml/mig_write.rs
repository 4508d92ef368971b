//! MIG management through NVML: reading a GPU's MIG profiles, placements and instances, and the
//! write calls (mode, create, destroy) of gpuhook's MIG manager (`gpuhook-mig`).
//!
//! [`Nvml::mig`] resolves the entry points once; every call takes the GPU by NVML index and
//! instances by id, so no NVML handle outlives a call. Errors are [`NodeError::Nvml`] with the
//! NVML return code (`IN_USE` = 19 when a process holds an instance).

use std::os::raw::c_uint;
use std::ptr::null_mut;

use super::ffi::{self, NvmlDevice, NvmlReturn, PciInfo, SUCCESS};
use super::mig_ffi::*;
use super::mig_names::{derived_name, v2_of};
use super::Nvml;
use crate::error::NodeError;

/// One GPU instance profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigGiProfile {
    pub id: u32,
    /// NVML's name without the `MIG ` prefix (`1g.10gb+me`).
    pub name: String,
    pub slices: u32,
    pub instance_count: u32,
    pub memory_mib: u64,
    /// Possible placements `(start, size)`.
    pub placements: Vec<(u32, u32)>,
    /// Its engines (`nvmlGpuInstanceProfileInfo_v2_t`'s counts).
    pub engines: MigEngines,
}

/// What a GPU instance profile holds besides memory, as NVML's profile info counts it (the
/// capacities NVIDIA's DRA driver publishes for a MIG device: `multiprocessors`, `copyEngines`,
/// `decoders`, `encoders`, `jpegEngines`, `ofaEngines`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MigEngines {
    pub multiprocessors: u32,
    pub copy_engines: u32,
    pub decoders: u32,
    pub encoders: u32,
    pub jpeg_engines: u32,
    pub ofa_engines: u32,
}

/// One GPU instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigGi {
    pub id: u32,
    pub profile_id: u32,
    pub placement: (u32, u32),
}

/// One compute instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigCi {
    pub id: u32,
    pub profile_id: u32,
    pub slices: u32,
}

/// NVML's MIG management calls, bound to a loaded [`Nvml`].
#[derive(Debug)]
pub struct MigApi<'a> {
    nvml: &'a Nvml,
    f: MigFns,
}

impl Nvml {
    /// The MIG management calls; an error when the library lacks one of them.
    pub fn mig(&self) -> Result<MigApi<'_>, NodeError> {
        let f = MigFns::load(&self._lib).map_err(|missing| NodeError::Nvml {
            path: self.path.clone(),
            call: "dlsym",
            target: Some(missing.to_string()),
            code: ffi::ERROR_FUNCTION_NOT_FOUND,
            message: "the library does not export this MIG function".into(),
        })?;
        Ok(MigApi { nvml: self, f })
    }
}

fn c_name(buf: &[std::os::raw::c_char]) -> String {
    let bytes: Vec<u8> = buf
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c.to_ne_bytes()[0])
        .collect();
    let s = String::from_utf8_lossy(&bytes).into_owned();
    s.strip_prefix("MIG ").map(str::to_string).unwrap_or(s)
}

impl MigApi<'_> {
    fn check(&self, rc: NvmlReturn, call: &'static str, gpu: u32) -> Result<(), NodeError> {
        self.nvml.check(rc, call, Some(&format!("GPU {gpu}")))
    }

    fn device(&self, gpu: u32) -> Result<NvmlDevice, NodeError> {
        Ok(self.nvml.device_by_index(gpu)?.handle)
    }

    /// `(current, pending)` MIG mode; `None` when the GPU has no MIG.
    pub fn mode(&self, gpu: u32) -> Result<Option<(bool, bool)>, NodeError> {
        let f = self
            .nvml
            .fns
            .device_get_mig_mode
            .ok_or_else(|| self.nvml.missing("nvmlDeviceGetMigMode"))?;
        let d = self.device(gpu)?;
        let (mut cur, mut pend) = (0, 0);
        // SAFETY: d came from NVML; both are valid out-pointers.
        let rc = unsafe { f(d, &mut cur, &mut pend) };
        if rc == ffi::ERROR_NOT_SUPPORTED {
            return Ok(None);
        }
        self.check(rc, "nvmlDeviceGetMigMode", gpu)?;
        Ok(Some((cur == 1, pend == 1)))
    }

    /// `(pciDeviceId, pciSubSystemId)`.
    pub fn pci_ids(&self, gpu: u32) -> Result<(u32, u32), NodeError> {
        let f = self
            .nvml
            .fns
            .device_get_pci_info_v3
            .ok_or_else(|| self.nvml.missing("nvmlDeviceGetPciInfo_v3"))?;
        let d = self.device(gpu)?;
        // SAFETY: all-zero is a valid PciInfo (integers and char arrays).
        let mut info: PciInfo = unsafe { std::mem::zeroed() };
        // SAFETY: d came from NVML; info is a valid out-pointer.
        let rc = unsafe { f(d, &mut info) };
        self.check(rc, "nvmlDeviceGetPciInfo_v3", gpu)?;
        Ok((info.pci_device_id, info.pci_sub_system_id))
    }

    /// The GPU instance profiles of a MIG-capable GPU, with their placements. In MIG mode with
    /// NVML's names (`nvmlDeviceGetGpuInstanceProfileInfoV`, which nvml.h answers only in MIG
    /// mode); with MIG mode off from the v1 call (nvml.h: answered for any MIG-capable GPU; its
    /// placements are too, "regardless of whether MIG is enabled") and the name derived as
    /// NVIDIA's go-nvlib names a profile ([`derived_name`]), as NVIDIA's DRA driver lists them.
    pub fn profiles(&self, gpu: u32) -> Result<Vec<MigGiProfile>, NodeError> {
        let d = self.device(gpu)?;
        let mut total = None;
        let mut out = Vec::new();
        for index in 0..GPU_INSTANCE_PROFILE_COUNT {
            // SAFETY: all-zero is a valid GiProfileInfoV2; the version is set before the call.
            let mut info: GiProfileInfoV2 = unsafe { std::mem::zeroed() };
            info.version = GI_PROFILE_INFO_V2;
            // SAFETY: d came from NVML; info is a valid, versioned out-pointer.
            let rc = unsafe { (self.f.gi_profile_info_v)(d, index, &mut info) };
            if rc == ffi::ERROR_NOT_SUPPORTED {
                let mut v1 = GiProfileInfoV1::default();
                // SAFETY: d came from NVML; v1 is a valid out-pointer of the v1 layout.
                let rc = unsafe { (self.f.gi_profile_info)(d, index, &mut v1) };
                if rc != SUCCESS {
                    continue;
                }
                let total = match total {
                    Some(t) => t,
                    None => *total.insert(self.nvml.device_by_index(gpu)?.memory_total()?),
                };
                let name = derived_name(index, v1.slice_count, v1.memory_size_mb, total);
                info = v2_of(v1, &name);
            } else if rc == ffi::ERROR_INVALID_ARGUMENT {
                continue;
            } else {
                self.check(rc, "nvmlDeviceGetGpuInstanceProfileInfoV", gpu)?;
            }
            let placements = self.placements(d, gpu, info.id)?;
            out.push(MigGiProfile {
                id: info.id,
                name: c_name(&info.name),
                slices: info.slice_count,
                instance_count: info.instance_count,
                memory_mib: info.memory_size_mb,
                placements,
                engines: MigEngines {
                    multiprocessors: info.multiprocessor_count,
                    copy_engines: info.copy_engine_count,
                    decoders: info.decoder_count,
                    encoders: info.encoder_count,
                    jpeg_engines: info.jpeg_count,
                    ofa_engines: info.ofa_count,
                },
            });
        }
        Ok(out)
    }

    fn placements(
        &self,
        d: NvmlDevice,
        gpu: u32,
        profile_id: u32,
    ) -> Result<Vec<(u32, u32)>, NodeError> {
        let mut buf = [Placement::default(); 16];
        let mut n: c_uint = 16;
        // SAFETY: buf holds n placements; n is a valid in/out pointer.
        let rc =
            unsafe { (self.f.possible_placements_v2)(d, profile_id, buf.as_mut_ptr(), &mut n) };
        self.check(rc, "nvmlDeviceGetGpuInstancePossiblePlacements_v2", gpu)?;
        Ok(buf
            .iter()
            .take(n as usize)
            .map(|p| (p.start, p.size))
            .collect())
    }

    /// The GPU instances of profile `profile_id`.
    pub fn gpu_instances(&self, gpu: u32, profile_id: u32) -> Result<Vec<MigGi>, NodeError> {
        let d = self.device(gpu)?;
        let mut handles = [null_mut(); 16];
        let mut n: c_uint = 0;
        // SAFETY: handles holds 16 entries, more than any profile's instance count (≤ 8).
        let rc = unsafe { (self.f.gpu_instances)(d, profile_id, handles.as_mut_ptr(), &mut n) };
        self.check(rc, "nvmlDeviceGetGpuInstances", gpu)?;
        let mut out = Vec::new();
        for h in handles.iter().take((n as usize).min(16)) {
            let info = self.gi_info(*h, gpu)?;
            out.push(MigGi {
                id: info.id,
                profile_id: info.profile_id,
                placement: (info.placement.start, info.placement.size),
            });
        }
        Ok(out)
    }

    fn gi_info(&self, gi: NvmlGpuInstance, gpu: u32) -> Result<GiInfo, NodeError> {
        let mut info = GiInfo {
            device: null_mut(),
            id: 0,
            profile_id: 0,
            placement: Placement::default(),
        };
        // SAFETY: gi came from NVML; info is a valid out-pointer.
        let rc = unsafe { (self.f.gi_info)(gi, &mut info) };
        self.check(rc, "nvmlGpuInstanceGetInfo", gpu)?;
        Ok(info)
    }

    fn gi(&self, gpu: u32, gi: u32) -> Result<NvmlGpuInstance, NodeError> {
        let d = self.device(gpu)?;
        let mut h = null_mut();
        // SAFETY: d came from NVML; h is a valid out-pointer.
        let rc = unsafe { (self.f.gi_by_id)(d, gi, &mut h) };
        self.check(rc, "nvmlDeviceGetGpuInstanceById", gpu)?;
        Ok(h)
    }

    /// The compute instances of GPU instance `gi`.
    pub fn compute_instances(&self, gpu: u32, gi: u32) -> Result<Vec<MigCi>, NodeError> {
        let g = self.gi(gpu, gi)?;
        let mut out = Vec::new();
        for profile in 0..COMPUTE_INSTANCE_PROFILE_COUNT {
            let mut handles = [null_mut(); 16];
            let mut n: c_uint = 0;
            // SAFETY: handles holds 16 entries, more than a GPU instance's compute instances (≤ 8).
            let rc =
                unsafe { (self.f.compute_instances)(g, profile, handles.as_mut_ptr(), &mut n) };
            if rc == ffi::ERROR_NOT_SUPPORTED || rc == ffi::ERROR_INVALID_ARGUMENT {
                continue;
            }
            self.check(rc, "nvmlGpuInstanceGetComputeInstances", gpu)?;
            for h in handles.iter().take((n as usize).min(16)) {
                let mut info = CiInfo {
                    device: null_mut(),
                    gpu_instance: null_mut(),
                    id: 0,
                    profile_id: 0,
                    placement: Placement::default(),
                };
                // SAFETY: h came from NVML; info is a valid out-pointer.
                let rc = unsafe { (self.f.ci_info_v2)(*h, &mut info) };
                self.check(rc, "nvmlComputeInstanceGetInfo_v2", gpu)?;
                out.push(MigCi {
                    id: info.id,
                    profile_id: info.profile_id,
                    slices: info.placement.size,
                });
            }
        }
        out.sort_by_key(|c| c.id);
        Ok(out)
    }

    /// `nvmlDeviceSetMigMode`; `Ok(true)` when the new mode waits for a GPU reset.
    pub fn set_mode(&self, gpu: u32, enabled: bool) -> Result<bool, NodeError> {
        let d = self.device(gpu)?;
        let mut activation: NvmlReturn = SUCCESS;
        // SAFETY: d came from NVML; activation is a valid out-pointer.
        let rc = unsafe { (self.f.set_mig_mode)(d, c_uint::from(enabled), &mut activation) };
        self.check(rc, "nvmlDeviceSetMigMode", gpu)?;
        Ok(self.mode(gpu)?.is_some_and(|(cur, pend)| cur != pend))
    }

    /// Creates a GPU instance (at `placement` when given); returns its id.
    pub fn create_gpu_instance(
        &self,
        gpu: u32,
        profile_id: u32,
        placement: Option<(u32, u32)>,
    ) -> Result<u32, NodeError> {
        let d = self.device(gpu)?;
        let mut h = null_mut();
        let rc = match placement {
            Some((start, size)) => {
                let p = Placement { start, size };
                // SAFETY: d came from NVML; p outlives the call; h is a valid out-pointer.
                unsafe { (self.f.create_gi_placed)(d, profile_id, &p, &mut h) }
            }
            // SAFETY: d came from NVML; h is a valid out-pointer.
            None => unsafe { (self.f.create_gi)(d, profile_id, &mut h) },
        };
        self.check(rc, "nvmlDeviceCreateGpuInstanceWithPlacement", gpu)?;
        Ok(self.gi_info(h, gpu)?.id)
    }

    /// Creates a compute instance of `NVML_COMPUTE_INSTANCE_PROFILE_*` `profile` in GPU instance
    /// `gi`; returns its id.
    pub fn create_compute_instance(
        &self,
        gpu: u32,
        gi: u32,
        profile: u32,
    ) -> Result<u32, NodeError> {
        let g = self.gi(gpu, gi)?;
        let mut info = CiProfileInfo::default();
        // SAFETY: g came from NVML; info is a valid out-pointer; engine profile 0 = SHARED.
        let rc = unsafe { (self.f.ci_profile_info)(g, profile, 0, &mut info) };
        self.check(rc, "nvmlGpuInstanceGetComputeInstanceProfileInfo", gpu)?;
        let mut h = null_mut();
        // SAFETY: g came from NVML; h is a valid out-pointer.
        let rc = unsafe { (self.f.create_ci)(g, info.id, &mut h) };
        self.check(rc, "nvmlGpuInstanceCreateComputeInstance", gpu)?;
        let mut ci = CiInfo {
            device: null_mut(),
            gpu_instance: null_mut(),
            id: 0,
            profile_id: 0,
            placement: Placement::default(),
        };
        // SAFETY: h came from NVML; ci is a valid out-pointer.
        let rc = unsafe { (self.f.ci_info_v2)(h, &mut ci) };
        self.check(rc, "nvmlComputeInstanceGetInfo_v2", gpu)?;
        Ok(ci.id)
    }

    /// Destroys compute instance `ci` of GPU instance `gi`.
    pub fn destroy_compute_instance(&self, gpu: u32, gi: u32, ci: u32) -> Result<(), NodeError> {
        let g = self.gi(gpu, gi)?;
        let mut h = null_mut();
        // SAFETY: g came from NVML; h is a valid out-pointer.
        let rc = unsafe { (self.f.ci_by_id)(g, ci, &mut h) };
        self.check(rc, "nvmlGpuInstanceGetComputeInstanceById", gpu)?;
        // SAFETY: h came from NVML and is destroyed once.
        let rc = unsafe { (self.f.ci_destroy)(h) };
        self.check(rc, "nvmlComputeInstanceDestroy", gpu)
    }

    /// Destroys GPU instance `gi` (its compute instances must be gone).
    pub fn destroy_gpu_instance(&self, gpu: u32, gi: u32) -> Result<(), NodeError> {
        let g = self.gi(gpu, gi)?;
        // SAFETY: g came from NVML and is destroyed once.
        let rc = unsafe { (self.f.gi_destroy)(g) };
        self.check(rc, "nvmlGpuInstanceDestroy", gpu)
    }
}
