//! Whether a process may create a CUDA context on its GPU, by the GPU's compute mode, as the
//! CUDA driver decides it. The simulator's CUDA application (`--sim-client` when no control
//! daemon answers) and its MPS server (`--sim-server`, which holds the device context its
//! clients share) ask here before they "run".
//!
//! NVIDIA's rules (CUDA Driver API, `CUcomputemode`; NVML `nvmlComputeMode_t`; `nvidia-smi(1)`,
//! "Compute Mode"):
//! * DEFAULT (0): multiple contexts per device;
//! * PROHIBITED (2): "No contexts can be created on this device at this time";
//! * EXCLUSIVE_PROCESS (3): "Only one context used by a single process can be present on this
//!   device at a time" (a live MPS server is that process: MPS guide, "Starting MPS control
//!   daemon", sets it for that reason).
//!
//! A refused context is `cudaErrorDevicesUnavailable` (46, CUDA Runtime API: "all CUDA devices
//! are busy or unavailable ... due to use of cudaComputeModeProhibited,
//! cudaComputeModeExclusiveProcess").
//!
//! The compute mode is read the way every other tool on a simulated node reads it: through the
//! node's NVML (`libnvidia-ml.so.1`, the mock, found by the dynamic loader like the real CUDA
//! driver's libraries: `LD_LIBRARY_PATH`, ld cache). No loadable NVML, or an NVML that does not
//! know the GPU: the mode is unknown and the process runs as before (DEFAULT).
//!
//! EXCLUSIVE_PROCESS needs to know whether another process holds a context. The simulator
//! records an MPS server's context as an `flock` on `<registry>/context-<gpu>.lock` in the
//! node's `GPUHOOK_SIM_MPS_GPU_REGISTRY` (see `gpus`); without a registry that rule is not
//! simulated.

use std::ffi::{c_char, c_int, c_uint, c_void, CString};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;

/// `NVML_COMPUTEMODE_PROHIBITED`.
pub const PROHIBITED: u32 = 2;
/// `NVML_COMPUTEMODE_EXCLUSIVE_PROCESS`.
pub const EXCLUSIVE_PROCESS: u32 = 3;

/// The CUDA runtime's text for `cudaErrorDevicesUnavailable`.
pub const DEVICES_UNAVAILABLE: &str = "CUDA-capable device(s) is/are busy or unavailable";

/// The device a process of this environment uses first: the first `CUDA_VISIBLE_DEVICES` entry
/// (a `GPU-` UUID or an ordinal), else ordinal 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Device {
    Uuid(String),
    Index(u32),
}

impl Device {
    pub fn from_visible(visible: Option<&str>) -> Option<Device> {
        let first = visible
            .unwrap_or("")
            .split(',')
            .map(str::trim)
            .find(|s| !s.is_empty());
        match first {
            None => Some(Device::Index(0)),
            Some(s) if s.starts_with("GPU-") => Some(Device::Uuid(s.to_string())),
            Some(s) => s.parse().ok().map(Device::Index),
        }
    }

    pub fn from_env() -> Option<Device> {
        Device::from_visible(std::env::var("CUDA_VISIBLE_DEVICES").ok().as_deref())
    }

    /// A name for lock files: the UUID, or `index-N`.
    fn key(&self) -> String {
        match self {
            Device::Uuid(u) => u.replace(['/', '\0'], "_"),
            Device::Index(i) => format!("index-{i}"),
        }
    }
}

type InitFn = unsafe extern "C" fn() -> c_int;
type ByUuidFn = unsafe extern "C" fn(*const c_char, *mut *mut c_void) -> c_int;
type ByIndexFn = unsafe extern "C" fn(c_uint, *mut *mut c_void) -> c_int;
type ModeFn = unsafe extern "C" fn(*mut c_void, *mut c_uint) -> c_int;

/// Looks `name` up in `lib` as a function of type `T`.
///
/// # Safety
/// `T` must be the function pointer type of the C symbol `name`.
unsafe fn symbol<T: Copy>(lib: *mut c_void, name: &std::ffi::CStr) -> Option<T> {
    // SAFETY: `lib` is a handle from dlopen and `name` is NUL-terminated.
    let p = unsafe { libc::dlsym(lib, name.as_ptr()) };
    if p.is_null() {
        return None;
    }
    // SAFETY: a non-null symbol address of the caller-promised function type, same size as a
    // data pointer on the platforms we build for.
    Some(unsafe { std::mem::transmute_copy::<*mut c_void, T>(&p) })
}

/// The compute mode of `dev` from the node's NVML; `None` when it cannot be known.
pub fn compute_mode(dev: &Device) -> Option<u32> {
    // SAFETY: dlopen with a NUL-terminated name; the library is kept loaded (never dlclosed).
    let lib = unsafe { libc::dlopen(c"libnvidia-ml.so.1".as_ptr(), libc::RTLD_NOW) };
    if lib.is_null() {
        return None;
    }
    // SAFETY: the types are NVML's C signatures of these symbols (nvml.h).
    let (init, shutdown, mode) = unsafe {
        (
            symbol::<InitFn>(lib, c"nvmlInit_v2")?,
            symbol::<InitFn>(lib, c"nvmlShutdown")?,
            symbol::<ModeFn>(lib, c"nvmlDeviceGetComputeMode")?,
        )
    };
    // SAFETY: nvmlInit_v2 takes no arguments.
    if unsafe { init() } != 0 {
        return None;
    }
    let mut handle: *mut c_void = std::ptr::null_mut();
    let rc = match dev {
        Device::Uuid(u) => {
            let c = CString::new(u.as_str()).ok()?;
            // SAFETY: the NVML signature; `c` is NUL-terminated, `handle` a valid out pointer.
            unsafe { symbol::<ByUuidFn>(lib, c"nvmlDeviceGetHandleByUUID") }
                // SAFETY: as above.
                .map(|f| unsafe { f(c.as_ptr(), &mut handle) })
        }
        Device::Index(i) => {
            // SAFETY: the NVML signature; `handle` is a valid out pointer.
            unsafe { symbol::<ByIndexFn>(lib, c"nvmlDeviceGetHandleByIndex_v2") }
                // SAFETY: as above.
                .map(|f| unsafe { f(*i, &mut handle) })
        }
    };
    let mut out: c_uint = 0;
    let got = (rc == Some(0))
        // SAFETY: `handle` came from NVML; `out` is a valid out pointer.
        .then(|| unsafe { mode(handle, &mut out) })
        .filter(|rc| *rc == 0)
        .map(|_| out);
    // SAFETY: matches the successful nvmlInit_v2 above.
    unsafe { shutdown() };
    got
}

/// A context held on a device (the MPS server's), released when dropped or at exit.
#[derive(Debug)]
pub struct Held(#[allow(dead_code)] Option<File>);

/// May a process create a context on `dev` now? `Ok` holds it (for EXCLUSIVE_PROCESS, where
/// the registry is known, until dropped); `Err` says why not.
pub fn create(dev: Option<&Device>, registry: Option<&Path>) -> Result<Held, String> {
    let Some(dev) = dev else {
        return Ok(Held(None));
    };
    match compute_mode(dev) {
        Some(PROHIBITED) => Err(format!(
            "{DEVICES_UNAVAILABLE}: {} is in compute mode PROHIBITED",
            dev.key()
        )),
        Some(EXCLUSIVE_PROCESS) => exclusive(dev, registry),
        _ => Ok(Held(None)),
    }
}

fn exclusive(dev: &Device, registry: Option<&Path>) -> Result<Held, String> {
    let Some(dir) = registry else {
        return Ok(Held(None));
    };
    let path = dir.join(format!("context-{}.lock", dev.key()));
    // Created by whoever may (a server running as a client's user may not write the registry);
    // locked through a read-only descriptor, which flock allows.
    let _ = std::fs::create_dir_all(dir).and_then(|_| {
        std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
    });
    let Ok(f) = File::open(&path) else {
        // The registry is out of this process's reach: the rule is not simulated for it.
        return Ok(Held(None));
    };
    // SAFETY: flock on a valid, owned file descriptor; no memory is involved.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Err(format!(
            "{DEVICES_UNAVAILABLE}: {} is in compute mode EXCLUSIVE_PROCESS and another process holds its context",
            dev.key()
        ));
    }
    Ok(Held(Some(f)))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_first_visible_device_is_used() {
        assert_eq!(Device::from_visible(None), Some(Device::Index(0)));
        assert_eq!(Device::from_visible(Some(" 1,0")), Some(Device::Index(1)));
        assert_eq!(
            Device::from_visible(Some("GPU-a,GPU-b")),
            Some(Device::Uuid("GPU-a".into()))
        );
        assert_eq!(Device::from_visible(Some("MIG-x")), None);
    }

    #[test]
    fn exclusive_process_allows_one_context_holder() {
        let dir = tempfile::tempdir().unwrap();
        let dev = Device::Uuid("GPU-a".into());
        let first = exclusive(&dev, Some(dir.path())).unwrap();
        let err = exclusive(&dev, Some(dir.path())).unwrap_err();
        assert!(err.contains("EXCLUSIVE_PROCESS"), "{err}");
        assert!(exclusive(&Device::Uuid("GPU-b".into()), Some(dir.path())).is_ok());
        drop(first);
        assert!(exclusive(&dev, Some(dir.path())).is_ok(), "released");
    }
}
