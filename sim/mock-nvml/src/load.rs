//! Finding and reading the node profile.
//!
//! The real `libnvidia-ml` learns about the node from the kernel driver, never from the
//! environment. The mock mirrors that: it asks the dynamic linker where it was loaded from
//! (`dladdr` on one of its own functions) and reads [`PROFILE_FILE_NAME`] from that directory,
//! which the materialiser fills next to `libnvidia-ml.so.<ver>`. No environment variable can point
//! a process at another node.

use std::ffi::{CStr, OsStr};
use std::os::raw::c_void;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use gpuhook_sim::profile::{NodeProfile, PROFILE_FILE_NAME};

use crate::ffi::{self, NvmlReturn};
use crate::table::Table;

/// Why `nvmlInit` failed: the NVML code to return and a message for stderr.
#[derive(Debug)]
pub struct LoadError {
    pub code: NvmlReturn,
    pub message: String,
}

/// Path of the loaded mock library, as the dynamic linker knows it.
pub fn library_path() -> Result<PathBuf, LoadError> {
    let fail = |message: String| LoadError {
        code: ffi::NVML_ERROR_UNKNOWN,
        message,
    };
    let addr = library_path as fn() -> Result<PathBuf, LoadError> as *const c_void;
    // SAFETY: all-zero bytes are a valid `Dl_info` (null pointers); dladdr overwrites it.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: `addr` is an address inside this object and `info` is a valid, writable Dl_info.
    let rc = unsafe { libc::dladdr(addr, &mut info) };
    if rc == 0 || info.dli_fname.is_null() {
        return Err(fail(
            "dladdr could not tell where the mock NVML library was loaded from".into(),
        ));
    }
    // SAFETY: dli_fname is a NUL-terminated string owned by the dynamic linker that stays valid
    // while this object is loaded; we copy it out immediately.
    let name = unsafe { CStr::from_ptr(info.dli_fname) };
    Ok(PathBuf::from(OsStr::from_bytes(name.to_bytes())))
}

/// Directory the library was loaded from (`.` for a bare file name).
pub fn library_dir() -> Result<PathBuf, LoadError> {
    let path = library_path()?;
    Ok(match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    })
}

/// Reads and checks the profile in `dir`, producing the device table.
pub fn load_table(dir: &Path) -> Result<Table, LoadError> {
    let path = dir.join(PROFILE_FILE_NAME);
    let not_loaded = |message: String| LoadError {
        code: ffi::NVML_ERROR_DRIVER_NOT_LOADED,
        message,
    };
    let text = std::fs::read_to_string(&path).map_err(|e| {
        not_loaded(format!(
            "cannot read the simulated node profile {}: {e} (materialise the driver root with \
             `gpuhook-sim`, or copy a profile there as {PROFILE_FILE_NAME})",
            path.display()
        ))
    })?;
    // The simulator's own parser and validator: the mock refuses exactly what `gpuhook-sim`
    // refuses, so a profile never means different things to the two.
    let profile = NodeProfile::from_toml_named(&text, &path.display().to_string())
        .map_err(|e| not_loaded(e.to_string()))?;
    let mut table = Table::from_profile(&profile, dir.to_path_buf()).map_err(|e| {
        not_loaded(format!(
            "invalid simulated node profile {}: {e}",
            path.display()
        ))
    })?;
    crate::mig_overlay::overlay(&mut table).map_err(not_loaded)?;
    Ok(table)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn library_path_names_this_object() {
        // In a unit test "this object" is the test executable itself.
        let path = library_path().expect("dladdr");
        let exe = std::env::current_exe().expect("current_exe");
        assert_eq!(path.canonicalize().ok(), exe.canonicalize().ok());
        assert!(library_dir().expect("dir").is_dir());
    }

    #[test]
    fn missing_profile_is_driver_not_loaded() {
        let dir = std::env::temp_dir().join(format!("mock-nvml-missing-{}", std::process::id()));
        let err = load_table(&dir).expect_err("no profile there");
        assert_eq!(err.code, ffi::NVML_ERROR_DRIVER_NOT_LOADED);
        assert!(err.message.contains(PROFILE_FILE_NAME), "{}", err.message);
    }
}
