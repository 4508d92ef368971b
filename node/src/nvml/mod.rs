//! A minimal, safe NVML binding loaded from the driver root.
//!
//! gpuhook only ever loads the NVML of the *driver root* (found through its `ld.so.cache`, see
//! [`NvmlLocation`]), never whatever `dlopen("libnvidia-ml.so.1")` would pick, which could be a
//! library planted in a container image. We keep our own small FFI instead of nvml-wrapper so the
//! symbol set is explicit, optional functions degrade gracefully, and [`Nvml`] is `Send + Sync` for
//! the MPS daemon. [`Nvml`] calls `nvmlShutdown` when dropped.

mod ffi;
mod locate;

use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_uint};
use std::path::{Path, PathBuf};

pub use locate::{NvmlLocation, NVML_SONAME, STANDARD_LIB_DIRS};

use crate::error::NodeError;
use ffi::{Fns, NvmlDevice, NvmlReturn, SUCCESS};

/// NVML compute modes (`nvmlComputeMode_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ComputeMode {
    Default,
    ExclusiveThread,
    Prohibited,
    ExclusiveProcess,
}

impl ComputeMode {
    fn to_raw(self) -> c_uint {
        match self {
            ComputeMode::Default => 0,
            ComputeMode::ExclusiveThread => 1,
            ComputeMode::Prohibited => 2,
            ComputeMode::ExclusiveProcess => 3,
        }
    }

    fn from_raw(v: c_uint) -> Option<Self> {
        Some(match v {
            0 => ComputeMode::Default,
            1 => ComputeMode::ExclusiveThread,
            2 => ComputeMode::Prohibited,
            3 => ComputeMode::ExclusiveProcess,
            _ => return None,
        })
    }
}

/// A loaded and initialised NVML.
#[derive(Debug)]
pub struct Nvml {
    fns: Fns,
    path: PathBuf,
    // Keeps the function pointers in `fns` valid; dropped after `nvmlShutdown`, so that a process
    // that loads NVML again (`gpuhook cdi refresh`) starts from a freshly loaded library.
    _lib: libloading::Library,
}

// SAFETY: NVML is thread-safe (documented: "all NVML calls are thread-safe"); the struct only
// holds plain function pointers and the library handle.
unsafe impl Send for Nvml {}
// SAFETY: as above, every method takes `&self` and NVML serialises internally.
unsafe impl Sync for Nvml {}

impl Nvml {
    /// Loads the library at `location` and calls `nvmlInit_v2`.
    pub fn load(location: &NvmlLocation) -> Result<Nvml, NodeError> {
        let path = location.path().to_path_buf();
        // SAFETY: loading runs the library's initialisers; the library is the driver root's
        // NVML (or one the operator named explicitly), which is what we intend to run.
        let lib = unsafe { libloading::Library::new(&path) }.map_err(|e| NodeError::NvmlLoad {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        let fns = Fns::load(&lib).map_err(|missing| NodeError::NvmlLoad {
            path: path.clone(),
            reason: format!("it does not export {missing}; is it really libnvidia-ml?"),
        })?;
        // SAFETY: nvmlInit_v2 takes no arguments.
        let rc = unsafe { (fns.init_v2)() };
        if rc != SUCCESS {
            // Not initialised: return before an `Nvml` exists, so Drop never calls nvmlShutdown.
            return Err(NodeError::NvmlInit {
                message: error_string(&fns, rc),
                path,
                code: rc,
            });
        }
        Ok(Nvml {
            fns,
            path,
            _lib: lib,
        })
    }

    /// Path of the loaded library.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn error_string(&self, rc: NvmlReturn) -> String {
        error_string(&self.fns, rc)
    }

    fn check(
        &self,
        rc: NvmlReturn,
        call: &'static str,
        target: Option<&str>,
    ) -> Result<(), NodeError> {
        if rc == SUCCESS {
            return Ok(());
        }
        Err(NodeError::Nvml {
            path: self.path.clone(),
            call,
            target: target.map(str::to_string),
            code: rc,
            message: self.error_string(rc),
        })
    }

    fn missing(&self, call: &'static str) -> NodeError {
        NodeError::Nvml {
            path: self.path.clone(),
            call,
            target: None,
            code: ffi::ERROR_FUNCTION_NOT_FOUND,
            message: "the library does not export this function".into(),
        }
    }

    /// `nvmlSystemGetDriverVersion`, e.g. `570.158.01`.
    pub fn driver_version(&self) -> Result<String, NodeError> {
        let mut buf = [0 as c_char; ffi::DRIVER_VERSION_BUFFER];
        // SAFETY: buf is writable for its full length, which we pass.
        let rc = unsafe {
            (self.fns.system_get_driver_version)(
                buf.as_mut_ptr(),
                c_uint::try_from(buf.len()).unwrap_or(c_uint::MAX),
            )
        };
        self.check(rc, "nvmlSystemGetDriverVersion", None)?;
        Ok(c_buf_to_string(&buf))
    }

    /// CUDA driver API version as `major.minor` (`12080` -> `12.8`).
    pub fn cuda_driver_version(&self) -> Result<String, NodeError> {
        let (f, call) = match (
            self.fns.system_get_cuda_driver_version_v2,
            self.fns.system_get_cuda_driver_version,
        ) {
            (Some(f), _) => (f, "nvmlSystemGetCudaDriverVersion_v2"),
            (None, Some(f)) => (f, "nvmlSystemGetCudaDriverVersion"),
            (None, None) => return Err(self.missing("nvmlSystemGetCudaDriverVersion")),
        };
        let mut v = 0;
        // SAFETY: v is a valid out-pointer.
        let rc = unsafe { f(&mut v) };
        self.check(rc, call, None)?;
        Ok(cuda_version_string(v))
    }

    /// `nvmlDeviceGetCount_v2`.
    pub fn device_count(&self) -> Result<u32, NodeError> {
        let mut n = 0;
        // SAFETY: n is a valid out-pointer.
        let rc = unsafe { (self.fns.device_get_count_v2)(&mut n) };
        self.check(rc, "nvmlDeviceGetCount_v2", None)?;
        Ok(n)
    }

    /// The GPU with this NVML index.
    pub fn device_by_index(&self, index: u32) -> Result<Device<'_>, NodeError> {
        let mut handle: NvmlDevice = std::ptr::null_mut();
        // SAFETY: handle is a valid out-pointer.
        let rc = unsafe { (self.fns.device_get_handle_by_index_v2)(index, &mut handle) };
        self.check(
            rc,
            "nvmlDeviceGetHandleByIndex_v2",
            Some(&format!("GPU {index}")),
        )?;
        Ok(Device {
            nvml: self,
            handle,
            label: format!("GPU {index}"),
        })
    }

    /// The GPU or MIG device with this UUID (`GPU-...` / `MIG-...`).
    pub fn device_by_uuid(&self, uuid: &str) -> Result<Device<'_>, NodeError> {
        let f = self
            .fns
            .device_get_handle_by_uuid
            .ok_or_else(|| self.missing("nvmlDeviceGetHandleByUUID"))?;
        let c = CString::new(uuid).map_err(|_| NodeError::Nvml {
            path: self.path.clone(),
            call: "nvmlDeviceGetHandleByUUID",
            target: Some(uuid.escape_debug().to_string()),
            code: ffi::ERROR_INVALID_ARGUMENT,
            message: "the UUID contains a NUL byte".into(),
        })?;
        let mut handle: NvmlDevice = std::ptr::null_mut();
        // SAFETY: c is NUL-terminated and outlives the call; handle is a valid out-pointer.
        let rc = unsafe { f(c.as_ptr(), &mut handle) };
        self.check(rc, "nvmlDeviceGetHandleByUUID", Some(uuid))?;
        Ok(Device {
            nvml: self,
            handle,
            label: uuid.to_string(),
        })
    }

    /// Sets the compute mode of the GPU with this UUID (needs root on a real driver).
    pub fn set_compute_mode(&self, uuid: &str, mode: ComputeMode) -> Result<(), NodeError> {
        self.device_by_uuid(uuid)?.set_compute_mode(mode)
    }

    /// Compute mode of the GPU with this UUID.
    pub fn compute_mode(&self, uuid: &str) -> Result<ComputeMode, NodeError> {
        self.device_by_uuid(uuid)?.compute_mode()
    }
}

impl Drop for Nvml {
    fn drop(&mut self) {
        // SAFETY: NVML was initialised in `load` (a failed init never builds a droppable Nvml).
        let rc = unsafe { (self.fns.shutdown)() };
        if rc != SUCCESS {
            tracing::debug!(code = rc, path = %self.path.display(), "nvmlShutdown failed");
        }
    }
}

fn error_string(fns: &Fns, rc: NvmlReturn) -> String {
    if let Some(f) = fns.error_string {
        // SAFETY: nvmlErrorString returns a static NUL-terminated string (or NULL).
        let p = unsafe { f(rc) };
        if !p.is_null() {
            // SAFETY: non-null pointer to a static C string owned by NVML.
            return unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
        }
    }
    format!("NVML error {rc}")
}

/// `12080` -> `12.8`, `13000` -> `13.0`.
pub fn cuda_version_string(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

fn c_buf_to_string(buf: &[c_char]) -> String {
    let bytes: Vec<u8> = buf
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c.to_ne_bytes()[0])
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

mod device;
pub mod events;
mod links;
mod metrics;
mod metrics_ffi;
mod mig_ffi;
mod mig_names;
mod mig_write;
pub use device::Device;
pub use events::{Event, EventSet};
pub use links::{NvLink, NVLINK_MAX_LINKS};
pub use metrics::{Clock, FieldSample, MemoryInfo, ProcessKind, ProcessSample, ProcessUse};
pub use mig_names::derived_name;
pub use mig_write::{MigApi, MigCi, MigEngines, MigGi, MigGiProfile};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_versions() {
        assert_eq!(cuda_version_string(12080), "12.8");
        assert_eq!(cuda_version_string(13000), "13.0");
        assert_eq!(cuda_version_string(11040), "11.4");
    }

    #[test]
    fn compute_mode_round_trip() {
        for m in [
            ComputeMode::Default,
            ComputeMode::ExclusiveThread,
            ComputeMode::Prohibited,
            ComputeMode::ExclusiveProcess,
        ] {
            assert_eq!(ComputeMode::from_raw(m.to_raw()), Some(m));
        }
        assert_eq!(ComputeMode::from_raw(4), None);
    }

    #[test]
    fn loading_a_non_nvml_library_names_it() {
        let libc = [
            "/lib/x86_64-linux-gnu/libc.so.6",
            "/lib64/libc.so.6",
            "/usr/lib/aarch64-linux-gnu/libc.so.6",
        ]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists());
        let Some(libc) = libc else { return };
        let err = Nvml::load(&NvmlLocation::explicit(&libc))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("libc.so.6") && err.contains("nvmlInit_v2"),
            "{err}"
        );
        let err = Nvml::load(&NvmlLocation::explicit(Path::new(
            "/nonexistent/libnvidia-ml.so.1",
        )))
        .unwrap_err();
        assert!(
            err.to_string().contains("/nonexistent/libnvidia-ml.so.1"),
            "{err}"
        );
    }
}
