//! NVML's MIG management calls: set the MIG mode, create and destroy GPU and compute instances
//! (with and without placement), possible placements and remaining capacity, with each
//! product's profiles and placement rules (`gpuhook_sim::mig_catalog`).
//!
//! A write locks the state directory, starts from the newest persisted layout, checks what NVML
//! checks (return codes from `nvml.h`: a profile or placement that does not exist is
//! `INVALID_ARGUMENT`, no room `INSUFFICIENT_RESOURCES`, a held GPU or an instance with compute
//! instances `IN_USE`), persists the layout, makes the driver root's capability files and nodes
//! follow, and swaps in the rebuilt table (see [`crate::mig_overlay`]).

use std::os::raw::c_uint;
use std::os::unix::io::AsRawFd;

use gpuhook_sim::mig_catalog::{gi_id_for, product_for};
use gpuhook_sim::mig_state::{self, SimGi, SimMigGpu};

use crate::api_instances::instance_handle;
use crate::ffi::{self, NvmlDevice, NvmlReturn};
use crate::ffi_mig::{NvmlGpuInstance, NvmlPlacement};
use crate::instances::GiProfile;
use crate::mig_overlay::{placement_size, state_of};
use crate::out::{guard, nonnull, put};
use crate::state;
use crate::table::{Gpu, Table};

const NVML_ERROR_RESET_REQUIRED: NvmlReturn = 16;
const NVML_ERROR_IN_USE: NvmlReturn = 19;
const NVML_ERROR_INSUFFICIENT_RESOURCES: NvmlReturn = 23;

/// Appends `call` to `calls.log` when the `count-calls` switch is there.
fn note(t: &Table, call: &str) {
    let dir = mig_state::state_dir(&t.dir);
    if dir.join("count-calls").exists() {
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("calls.log"))
        {
            let _ = writeln!(f, "{call}");
        }
    }
}

/// Runs one MIG write on GPU `index` under the state directory's lock: `f` changes the GPU's
/// persisted layout and returns a value; the new table is swapped in before returning it.
fn write_gpu<R>(
    call: &str,
    index: usize,
    f: impl FnOnce(&Gpu, &mut SimMigGpu) -> Result<R, NvmlReturn>,
) -> Result<(R, &'static Table), NvmlReturn> {
    let mut t = state::table()?;
    note(t, call);
    let dir = mig_state::state_dir(&t.dir);
    std::fs::create_dir_all(&dir).map_err(|_| ffi::NVML_ERROR_NO_PERMISSION)?;
    let lock =
        std::fs::File::create(dir.join(".lock")).map_err(|_| ffi::NVML_ERROR_NO_PERMISSION)?;
    // SAFETY: flock on a descriptor we own; released when `lock` is dropped.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(ffi::NVML_ERROR_UNKNOWN);
    }
    if mig_state::generation(&t.dir) != t.mig.generation {
        t = state::reload()?;
    }
    let gpu = t.gpus.get(index).ok_or(ffi::NVML_ERROR_INVALID_ARGUMENT)?;
    if !gpu.mig_capable {
        return Err(ffi::NVML_ERROR_NOT_SUPPORTED);
    }
    let serial = mig_state::load(&t.dir, &gpu.uuid)
        .ok()
        .flatten()
        .map_or(0, |s| s.serial);
    let mut st = state_of(gpu, serial);
    let r = f(gpu, &mut st)?;
    mig_state::save(&t.dir, &gpu.uuid, &st).map_err(|_| ffi::NVML_ERROR_NO_PERMISSION)?;
    let live: Vec<(u32, Vec<u32>)> = if st.mig_enabled {
        st.instances
            .iter()
            .map(|g| (g.id, g.cis.iter().map(|c| c.id).collect()))
            .collect()
    } else {
        Vec::new()
    };
    if let Err(e) = gpuhook_sim::materialise::mig_live::sync_gpu(
        &t.mig.root,
        t.mig.caps_major,
        gpu.minor,
        &live,
    ) {
        eprintln!("mock NVML: cannot update the MIG capability files: {e}");
    }
    let t = state::reload()?;
    drop(lock);
    Ok((r, t))
}

fn gpu_index(t: &Table, device: NvmlDevice) -> Result<usize, NvmlReturn> {
    let gpu = t.resolve(device)?.whole_gpu()?;
    Ok(gpu.index as usize)
}

fn in_use(t: &Table, gpu: &Gpu) -> bool {
    mig_state::in_use_file(&t.dir, &gpu.uuid).exists()
}

/// `nvmlDeviceSetMigMode`: immediate unless the GPU's `mig-needs-reset-<uuid>` switch is set,
/// then pending (`activationStatus` = `RESET_REQUIRED`) until the switch goes and NVML is
/// initialised again.
///
/// # Safety
/// `activation_status` must be null or valid for a write of an `nvmlReturn_t`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceSetMigMode(
    device: NvmlDevice,
    mode: c_uint,
    activation_status: *mut NvmlReturn,
) -> NvmlReturn {
    guard(|| {
        let activation_status = nonnull(activation_status)?;
        if mode > 1 {
            return Err(ffi::NVML_ERROR_INVALID_ARGUMENT);
        }
        let t = state::table()?;
        let index = gpu_index(t, device)?;
        let held = in_use(t, &t.gpus[index]);
        let needs_reset = mig_state::needs_reset_file(&t.dir, &t.gpus[index].uuid).exists();
        let want = mode == 1;
        let (status, _) = write_gpu("nvmlDeviceSetMigMode", index, |_, st| {
            if held || (st.mig_enabled && !st.instances.is_empty()) {
                return Err(NVML_ERROR_IN_USE);
            }
            if needs_reset && want != st.mig_enabled {
                st.pending = Some(want);
                return Ok(NVML_ERROR_RESET_REQUIRED);
            }
            st.mig_enabled = want;
            st.pending = None;
            st.instances.clear();
            Ok(ffi::NVML_SUCCESS)
        })?;
        // SAFETY: non-null; valid for a write per the contract.
        unsafe { put(activation_status, status) }
    })
}

/// Possible placements of a GPU instance profile on this product.
fn placements(gpu: &Gpu, p: &GiProfile) -> Vec<NvmlPlacement> {
    let size = placement_size(gpu, p);
    let starts: Vec<c_uint> =
        match product_for(&gpu.name).and_then(|prod| prod.profiles.iter().find(|x| x.id == p.id)) {
            Some(x) => x.starts.to_vec(),
            None => (0..8).filter(|s| s % size == 0 && s + size <= 8).collect(),
        };
    starts
        .into_iter()
        .map(|start| NvmlPlacement { start, size })
        .collect()
}

fn memory_slices(gpu: &Gpu) -> c_uint {
    product_for(&gpu.name).map_or(8, |p| p.memory_slices)
}

fn free(st: &SimMigGpu, p: &NvmlPlacement) -> bool {
    !st.instances
        .iter()
        .any(|g| g.start < p.start + p.size && p.start < g.start + g.size)
}

fn profile(gpu: &Gpu, profile_id: c_uint) -> Result<&GiProfile, NvmlReturn> {
    if !gpu.mig_enabled {
        return Err(ffi::NVML_ERROR_NOT_SUPPORTED);
    }
    gpu.profiles
        .iter()
        .find(|p| p.id == profile_id)
        .ok_or(ffi::NVML_ERROR_INVALID_ARGUMENT)
}

/// Creates a GPU instance at `placement` (or the highest free start NVML allows).
fn create_gi(
    device: NvmlDevice,
    profile_id: c_uint,
    placement: Option<NvmlPlacement>,
    out: *mut NvmlGpuInstance,
) -> Result<(), NvmlReturn> {
    let out = nonnull(out)?;
    let t = state::table()?;
    let index = gpu_index(t, device)?;
    let call = if placement.is_some() {
        "nvmlDeviceCreateGpuInstanceWithPlacement"
    } else {
        "nvmlDeviceCreateGpuInstance"
    };
    let (id, t) = write_gpu(call, index, |gpu, st| {
        let p = profile(gpu, profile_id)?;
        let allowed = placements(gpu, p);
        if st
            .instances
            .iter()
            .filter(|g| g.profile_id == profile_id)
            .count()
            >= p.instance_count as usize
        {
            return Err(NVML_ERROR_INSUFFICIENT_RESOURCES);
        }
        let at = match placement {
            Some(want) => {
                if !allowed
                    .iter()
                    .any(|a| a.start == want.start && a.size == want.size)
                {
                    return Err(ffi::NVML_ERROR_INVALID_ARGUMENT);
                }
                Some(want).filter(|w| free(st, w))
            }
            None => allowed.iter().rev().find(|a| free(st, a)).copied(),
        }
        .ok_or(NVML_ERROR_INSUFFICIENT_RESOURCES)?;
        let id = gi_id_for(memory_slices(gpu), at.start, at.size).ok_or(ffi::NVML_ERROR_UNKNOWN)?;
        st.instances.push(SimGi {
            id,
            profile_id,
            start: at.start,
            size: at.size,
            cis: Vec::new(),
        });
        st.instances.sort_by_key(|g| g.id);
        Ok(id)
    })?;
    let gi = t.gpus[index]
        .gis
        .iter()
        .find(|g| g.id == id)
        .ok_or(ffi::NVML_ERROR_UNKNOWN)?;
    // SAFETY: non-null; valid for a write per the caller's contract.
    unsafe { put(out, instance_handle(gi)) }
}

/// # Safety
/// `gpu_instance` must be null or valid for a write of an `nvmlGpuInstance_t`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceCreateGpuInstance(
    device: NvmlDevice,
    profile_id: c_uint,
    gpu_instance: *mut NvmlGpuInstance,
) -> NvmlReturn {
    guard(|| create_gi(device, profile_id, None, gpu_instance))
}

/// # Safety
/// `placement` must be null or valid for a read; `gpu_instance` null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceCreateGpuInstanceWithPlacement(
    device: NvmlDevice,
    profile_id: c_uint,
    placement: *const NvmlPlacement,
    gpu_instance: *mut NvmlGpuInstance,
) -> NvmlReturn {
    guard(|| {
        let p = nonnull(placement.cast_mut())?;
        // SAFETY: non-null and valid for a read per the contract.
        let p = unsafe { p.read_unaligned() };
        create_gi(device, profile_id, Some(p), gpu_instance)
    })
}

/// # Safety
/// `placements` must be null (count only) or hold `*count` entries; `count` valid.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstancePossiblePlacements_v2(
    device: NvmlDevice,
    profile_id: c_uint,
    placements_out: *mut NvmlPlacement,
    count: *mut c_uint,
) -> NvmlReturn {
    crate::api_device::with_device(device, |_, d| {
        let count = nonnull(count)?;
        let gpu = d.whole_gpu()?;
        let p = gpu
            .profiles
            .iter()
            .find(|p| p.id == profile_id)
            .ok_or(ffi::NVML_ERROR_INVALID_ARGUMENT)?;
        let list = placements(gpu, p);
        let n = c_uint::try_from(list.len()).map_err(|_| ffi::NVML_ERROR_UNKNOWN)?;
        if !placements_out.is_null() {
            // SAFETY: count is valid for reads per the contract.
            if unsafe { count.read_unaligned() } < n {
                return Err(ffi::NVML_ERROR_INSUFFICIENT_SIZE);
            }
            for (i, pl) in list.iter().enumerate() {
                // SAFETY: the caller's array holds *count >= n entries.
                unsafe { placements_out.add(i).write_unaligned(*pl) };
            }
        }
        // SAFETY: non-null; valid for a write per the contract.
        unsafe { put(count, n) }
    })
}

/// How many more instances of a profile fit, given the instances there are.
///
/// # Safety
/// `count` must be null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceRemainingCapacity(
    device: NvmlDevice,
    profile_id: c_uint,
    count: *mut c_uint,
) -> NvmlReturn {
    crate::api_device::with_device(device, |_, d| {
        let count = nonnull(count)?;
        let gpu = d.whole_gpu()?;
        let p = profile(gpu, profile_id)?;
        let mut st = state_of(gpu, 0);
        let mut n: c_uint = 0;
        let existing = st
            .instances
            .iter()
            .filter(|g| g.profile_id == profile_id)
            .count();
        for pl in placements(gpu, p).iter().rev() {
            if existing + n as usize >= p.instance_count as usize {
                break;
            }
            if free(&st, pl) {
                st.instances.push(SimGi {
                    id: 0,
                    profile_id,
                    start: pl.start,
                    size: pl.size,
                    cis: Vec::new(),
                });
                n += 1;
            }
        }
        // SAFETY: non-null; valid for a write per the contract.
        unsafe { put(count, n) }
    })
}

#[path = "api_mig_write_ci.rs"]
mod ci;
