//! MIG mode switches of partitionable GPUs, as NVIDIA's DynamicMIG does them
//! (`cmd/gpu-kubelet-plugin/nvlib.go`: `createMigDevice` enables MIG mode before the first MIG
//! device of a GPU; `deleteMigDevice` → `maybeDisableMigMode` disables it when no MIG device is
//! left, on GPUs that switch without a reset only, `supportsMIGModeToggle`), always under the
//! partitioner's MIG lock:
//!
//! - a placement on a GPU with MIG mode off switches it on (only where it switches without a
//!   reset); the GPU is marked (`<plugin dir>/mig-mode/<GPU UUID>`) before NVML is asked;
//! - the last MIG device of a marked GPU destroyed (by anyone's hand: no instance is left)
//!   switches it off and drops the mark; a GPU the plugin did not switch on is left as it is;
//! - the full GPU of a GPU in MIG mode switches it off, only when no MIG device exists on it.
//!
//! Never switched: a GPU with any MIG device (its own or another's), a GPU whose mode change is
//! pending a reset (refused with the reason), a GPU that needs a reset to switch (NVML's answer:
//! the switch is left pending; it is set back at once and the claim refused). A GPU a process
//! uses is refused by NVML itself (`IN_USE`), which is the claim's error.

use std::path::{Path, PathBuf};

use gpuhook_mig::{GpuState, MigBackend};

use crate::slot::Slot;

fn describe(g: &GpuState) -> String {
    format!("GPU {} ({})", g.index, g.uuid)
}

fn mark_path(dir: &Path, uuid: &str) -> Option<PathBuf> {
    let ok = !uuid.is_empty()
        && uuid.len() <= 96
        && uuid.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    ok.then(|| dir.join(uuid))
}

fn pending(g: &GpuState) -> Result<(), String> {
    if g.mig.pending_change() {
        return Err(format!(
            "{}: a MIG mode change is pending a GPU reset; reset the GPU (nvidia-smi -r) or set \
             the mode back before a claim can use it",
            describe(g)
        ));
    }
    Ok(())
}

/// Sets MIG mode `on`; a switch NVML leaves pending (a reset needed) is set back and refused.
fn switch(b: &mut dyn MigBackend, g: &GpuState, on: bool) -> Result<(), String> {
    let what = if on { "on" } else { "off" };
    match b.set_mig_mode(g.index, on) {
        Ok(false) => {
            tracing::info!(gpu = g.index, uuid = %g.uuid, mig = what, "MIG mode switched");
            Ok(())
        }
        Ok(true) => {
            let back = match b.set_mig_mode(g.index, !on) {
                Ok(_) => "set back".to_string(),
                Err(e) => format!("setting it back failed too: {e}"),
            };
            Err(format!(
                "{}: switching MIG mode {what} needs a GPU reset (NVML left it pending; {back}); \
                 this GPU cannot serve the claim without a reset",
                describe(g)
            ))
        }
        Err(e) => Err(format!(
            "{}: switching MIG mode {what}: {e} (NVML refuses while a process uses the GPU)",
            describe(g)
        )),
    }
}

/// Before a placement's create on `g` (MIG mode off): switches MIG mode on, the GPU marked first.
pub fn switch_on(
    b: &mut dyn MigBackend,
    g: &GpuState,
    slot: &Slot,
    marks: Option<&Path>,
) -> Result<(), String> {
    pending(g)?;
    if !slot.toggles {
        return Err(format!(
            "{}: MIG mode is off and this GPU cannot switch it without a reset",
            describe(g)
        ));
    }
    let mark = marks.and_then(|d| mark_path(d, &g.uuid));
    if let Some(m) = &mark {
        let made = m.parent().map(std::fs::create_dir_all).transpose();
        made.map_err(|e| format!("{}: {e}", m.display()))?;
        gpuhook_fs::write_atomic(m, b"switched on by gpuhook-dra-plugin\n", 0o644)
            .map_err(|e| format!("{}: {e}", m.display()))?;
    }
    let r = switch(b, g, true);
    if let (Err(_), Some(m)) = (&r, &mark) {
        let _ = std::fs::remove_file(m);
    }
    r
}

/// Before the full GPU of `slot` is prepared: MIG mode off (switched off when no MIG device
/// exists and the GPU switches without a reset).
pub fn full_gpu(b: &mut dyn MigBackend, slot: &Slot, marks: Option<&Path>) -> Result<(), String> {
    let g = b.gpu(slot.gpu_index).map_err(|e| e.to_string())?;
    pending(&g)?;
    if !g.mig.enabled() {
        return Ok(());
    }
    if !slot.toggles {
        return Err(format!(
            "{}: the full GPU is in MIG mode, which this GPU cannot leave without a reset",
            describe(&g)
        ));
    }
    if let Some(gi) = g.instances.first() {
        return Err(format!(
            "{}: the full GPU is in MIG mode with {} MIG device(s) (GPU instance {} at slice {}); \
             it is prepared as a GPU only once they are gone",
            describe(&g),
            g.instances.len(),
            gi.id,
            gi.placement.start
        ));
    }
    switch(b, &g, false)?;
    if let Some(m) = marks.and_then(|d| mark_path(d, &g.uuid)) {
        let _ = std::fs::remove_file(m);
    }
    Ok(())
}

/// After a MIG device of GPU `index` is destroyed (or a create failed): a GPU this plugin
/// switched on (marked) with no MIG device left is switched off (NVIDIA's
/// `maybeDisableMigMode`). Failures are logged: the destroy itself succeeded.
pub fn maybe_off(b: &mut dyn MigBackend, index: u32, marks: Option<&Path>) {
    let Some(dir) = marks else {
        return;
    };
    let g = match b.gpu(index) {
        Ok(g) => g,
        Err(e) => {
            tracing::warn!(gpu = index, error = %e, "MIG mode left as it is");
            return;
        }
    };
    let Some(mark) = mark_path(dir, &g.uuid).filter(|m| m.exists()) else {
        return;
    };
    if !g.instances.is_empty() || g.mig.pending_change() {
        return;
    }
    if g.mig.enabled() {
        if let Err(e) = switch(b, &g, false) {
            tracing::warn!(gpu = index, error = %e, "MIG mode left on");
            return;
        }
    }
    let _ = std::fs::remove_file(mark);
}

#[cfg(test)]
#[path = "modes_tests.rs"]
mod tests;
