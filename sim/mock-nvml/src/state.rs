//! Process-wide NVML state: the init reference count, the device table, and the compute mode.
//!
//! NVML counts `nvmlInit*` calls and only really shuts down when every one has been matched by
//! `nvmlShutdown`; calls in between fail with `NVML_ERROR_UNINITIALIZED`. The table is loaded on
//! the first successful init and kept (leaked) for the life of the process so handles never
//! dangle. The compute mode is the one piece of mutable GPU state: it lives in a small file per
//! GPU under `<libdir>/gpuhook-sim-state/` so that *another* process (the MPS daemon under test,
//! a second load of the library) sees a mode set here, as it would on a real node.

use std::io::Write;
use std::os::raw::c_uint;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

use crate::ffi::{self, NvmlReturn};
use crate::load;
use crate::table::{Gpu, Table};

/// Directory (beside the profile) holding mutable simulated GPU state.
pub const STATE_DIR_NAME: &str = "gpuhook-sim-state";

#[derive(Debug)]
struct Global {
    refcount: u32,
    table: Option<&'static Table>,
}

static GLOBAL: Mutex<Global> = Mutex::new(Global {
    refcount: 0,
    table: None,
});

fn global() -> MutexGuard<'static, Global> {
    // A panic while holding the lock cannot leave `Global` inconsistent (plain field writes).
    GLOBAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// `nvmlInit*`: loads the table on first use, then counts the caller in.
pub fn init() -> NvmlReturn {
    let mut g = global();
    // Another process changed a MIG layout since this table was built: take it up.
    if let Some(t) = g.table {
        if gpuhook_sim::mig_state::generation(&t.dir) != t.mig.generation {
            if let Err(code) = rebuild(&mut g, t) {
                return code;
            }
        }
    }
    if g.table.is_none() {
        let loaded = load::library_dir().and_then(|dir| load::load_table(&dir));
        match loaded {
            Ok(table) => g.table = Some(Box::leak(Box::new(table))),
            Err(e) => {
                eprintln!("mock NVML: nvmlInit failed: {}", e.message);
                return e.code;
            }
        }
    }
    g.refcount = g.refcount.saturating_add(1);
    ffi::NVML_SUCCESS
}

/// `nvmlShutdown`: counts one caller out.
pub fn shutdown() -> NvmlReturn {
    let mut g = global();
    if g.refcount == 0 {
        return ffi::NVML_ERROR_UNINITIALIZED;
    }
    g.refcount -= 1;
    ffi::NVML_SUCCESS
}

/// The table, or `NVML_ERROR_UNINITIALIZED` outside an init/shutdown pair.
pub fn table() -> Result<&'static Table, NvmlReturn> {
    let g = global();
    match g.table {
        Some(t) if g.refcount > 0 => Ok(t),
        _ => Err(ffi::NVML_ERROR_UNINITIALIZED),
    }
}

fn compute_mode_file(table: &Table, gpu: &Gpu) -> PathBuf {
    // UUIDs were restricted to [A-Za-z0-9-] when the table was built, so this stays in the dir.
    table
        .dir
        .join(STATE_DIR_NAME)
        .join(format!("compute-mode-{}", gpu.uuid))
}

/// Current compute mode of a GPU (`DEFAULT` until someone sets one).
pub fn compute_mode(table: &Table, gpu: &Gpu) -> Result<c_uint, NvmlReturn> {
    let path = compute_mode_file(table, gpu);
    match std::fs::read_to_string(&path) {
        Ok(text) => match text.trim().parse::<c_uint>() {
            Ok(mode) if mode < ffi::NVML_COMPUTEMODE_COUNT => Ok(mode),
            _ => {
                eprintln!(
                    "mock NVML: {} holds {:?}, not a compute mode 0-3",
                    path.display(),
                    text.trim()
                );
                Err(ffi::NVML_ERROR_UNKNOWN)
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(ffi::NVML_COMPUTEMODE_DEFAULT),
        Err(e) => {
            eprintln!("mock NVML: cannot read {}: {e}", path.display());
            Err(ffi::NVML_ERROR_UNKNOWN)
        }
    }
}

/// Persists a GPU's compute mode atomically (temp file + rename).
pub fn set_compute_mode(table: &Table, gpu: &Gpu, mode: c_uint) -> Result<(), NvmlReturn> {
    if mode >= ffi::NVML_COMPUTEMODE_COUNT {
        return Err(ffi::NVML_ERROR_INVALID_ARGUMENT);
    }
    let path = compute_mode_file(table, gpu);
    let io_err = |e: std::io::Error| {
        eprintln!("mock NVML: cannot write {}: {e}", path.display());
        if e.kind() == std::io::ErrorKind::PermissionDenied {
            ffi::NVML_ERROR_NO_PERMISSION
        } else {
            ffi::NVML_ERROR_UNKNOWN
        }
    };
    let dir = table.dir.join(STATE_DIR_NAME);
    std::fs::create_dir_all(&dir).map_err(io_err)?;
    let tmp = dir.join(format!(
        ".compute-mode-{}.{}.tmp",
        gpu.uuid,
        std::process::id()
    ));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        writeln!(f, "{mode}")?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io_err(e)
    })
}

fn rebuild(g: &mut Global, old: &'static Table) -> Result<&'static Table, NvmlReturn> {
    let mut table = load::load_table(&old.dir).map_err(|e| {
        eprintln!("mock NVML: reloading the MIG layout failed: {}", e.message);
        e.code
    })?;
    table.mig.previous = Some(old);
    let t: &'static Table = Box::leak(Box::new(table));
    g.table = Some(t);
    Ok(t)
}

/// Rebuilds the table after a MIG write (the old one stays, so its handles still resolve).
pub fn reload() -> Result<&'static Table, NvmlReturn> {
    let mut g = global();
    let old = match g.table {
        Some(t) if g.refcount > 0 => t,
        _ => return Err(ffi::NVML_ERROR_UNINITIALIZED),
    };
    rebuild(&mut g, old)
}
