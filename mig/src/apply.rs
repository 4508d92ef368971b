//! Carrying plans out through a [`MigBackend`], GPU by GPU.
//!
//! Each GPU is planned from what the backend reads *now* and changed on its own: a failure on
//! one GPU never touches another. A step that is cut short (crash, kill, NVML error) leaves
//! instances that the next run reads and plans from again; a GPU instance without its compute
//! instances counts as "not what was asked" and is recreated. Destroying a MIG device that is
//! in use (an [`InUse`] holder, or NVML's `IN_USE`) is refused unless the caller drains.

use crate::error::{MigError, NVML_ERROR_IN_USE};
use crate::holders::{describe, fix_for, Holder, InUse};
use crate::plan::{plan, GpuPlan, NewInstance};
use crate::select::{select, Desired};
use crate::spec::MigConfigSpec;
use crate::state::{ci_profile_id, GpuInstance, GpuState, Placement};

/// What the manager needs of NVML. [`crate::NvmlBackend`] is the real one; tests use fakes.
pub trait MigBackend {
    /// Every GPU, in index (PCI) order, with its current MIG state.
    fn gpus(&mut self) -> Result<Vec<GpuState>, MigError>;
    /// One GPU, re-read.
    fn gpu(&mut self, index: u32) -> Result<GpuState, MigError>;
    /// `nvmlDeviceSetMigMode`; `Ok(true)` when the change waits for a GPU reset.
    fn set_mig_mode(&mut self, index: u32, enabled: bool) -> Result<bool, MigError>;
    /// `nvmlDeviceCreateGpuInstanceWithPlacement` (or without, when `placement` is `None`);
    /// returns the new GPU instance id.
    fn create_gpu_instance(
        &mut self,
        index: u32,
        profile_id: u32,
        placement: Option<Placement>,
    ) -> Result<u32, MigError>;
    /// `nvmlGpuInstanceCreateComputeInstance`; returns the new compute instance id.
    fn create_compute_instance(
        &mut self,
        index: u32,
        gi: u32,
        ci_profile_id: u32,
    ) -> Result<u32, MigError>;
    /// `nvmlComputeInstanceDestroy`.
    fn destroy_compute_instance(&mut self, index: u32, gi: u32, ci: u32) -> Result<(), MigError>;
    /// `nvmlGpuInstanceDestroy`.
    fn destroy_gpu_instance(&mut self, index: u32, gi: u32) -> Result<(), MigError>;
}

/// How to apply.
#[derive(Debug, Clone, Copy, Default)]
pub struct ApplyOptions {
    /// Plan only.
    pub dry_run: bool,
    /// Destroy MIG devices even when they are in use.
    pub drain: bool,
    /// Change MIG modes only (mig-parted's `--mode-only`).
    pub mode_only: bool,
}

/// What happened to one GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuStatus {
    Unchanged,
    Changed,
    /// Changed as far as possible; the MIG mode change waits for a GPU reset or reboot.
    PendingReset,
    /// Planned only (dry run).
    Planned,
    Failed(String),
}

/// One GPU's result: the plans made (mode, then layout) and the status.
#[derive(Debug, Clone)]
pub struct GpuOutcome {
    pub index: u32,
    pub plans: Vec<GpuPlan>,
    pub status: GpuStatus,
}

/// The whole apply.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub gpus: Vec<GpuOutcome>,
}

impl Outcome {
    pub fn failed(&self) -> Vec<&GpuOutcome> {
        self.gpus
            .iter()
            .filter(|g| matches!(g.status, GpuStatus::Failed(_)))
            .collect()
    }

    pub fn pending(&self) -> bool {
        self.gpus
            .iter()
            .any(|g| g.status == GpuStatus::PendingReset)
    }

    /// Nothing was (or would be) written.
    pub fn unchanged(&self) -> bool {
        self.gpus.iter().all(|g| g.status == GpuStatus::Unchanged)
    }
}

/// Applies config `entries` to every GPU it selects. Config errors (a GPU that cannot do MIG
/// listed by index) fail before anything is written; per-GPU failures are in the outcome.
pub fn apply(
    backend: &mut dyn MigBackend,
    entries: &[MigConfigSpec],
    in_use: &dyn InUse,
    opts: ApplyOptions,
) -> Result<Outcome, MigError> {
    let gpus = backend.gpus()?;
    let desired = select(entries, &gpus)?;
    // Every GPU's profiles are checked before the first write, so a bad name changes nothing.
    for d in &desired {
        if let Some(g) = gpus.iter().find(|g| g.index == d.index) {
            if g.mig.enabled() && d.mig_enabled && !opts.mode_only {
                plan(g, d)?;
            }
        }
    }
    let mut out = Outcome::default();
    for d in &desired {
        let Some(g) = gpus.iter().find(|g| g.index == d.index) else {
            continue;
        };
        let result = apply_gpu(backend, g.clone(), d, in_use, opts);
        out.gpus.push(result);
    }
    Ok(out)
}

fn apply_gpu(
    backend: &mut dyn MigBackend,
    gpu: GpuState,
    d: &Desired,
    in_use: &dyn InUse,
    opts: ApplyOptions,
) -> GpuOutcome {
    let mut o = GpuOutcome {
        index: gpu.index,
        plans: Vec::new(),
        status: GpuStatus::Unchanged,
    };
    let was_enabled = gpu.mig.enabled();
    let mut gpu = gpu;
    // At most: a mode plan, then a layout plan on the re-read GPU.
    for round in 0..2 {
        if round == 1 && opts.mode_only {
            return o;
        }
        let p = match plan(&gpu, d) {
            Ok(p) => p,
            Err(e) if round == 1 && !was_enabled => return undo_enable(backend, &gpu, o, e),
            Err(e) => return fail(o, e),
        };
        let mode_only_stop = opts.mode_only && p.set_mode.is_none();
        o.plans.push(p.clone());
        if p.pending_mode {
            o.status = GpuStatus::PendingReset;
            return o;
        }
        if p.is_noop() || mode_only_stop {
            return o;
        }
        if opts.dry_run {
            o.status = GpuStatus::Planned;
            return o;
        }
        match carry_out(backend, &gpu, &p, in_use, opts) {
            Ok(true) => {
                o.status = GpuStatus::PendingReset;
                return o;
            }
            Ok(false) => o.status = GpuStatus::Changed,
            Err(e) => return fail(o, e),
        }
        if p.set_mode.is_none() {
            return o;
        }
        gpu = match backend.gpu(gpu.index) {
            Ok(g) => g,
            Err(e) => return fail(o, e),
        };
    }
    o
}

/// The layout cannot be made on a GPU whose MIG mode this run just enabled (NVML lists a GPU's
/// profiles only once MIG is on): MIG is turned off again, so bad input leaves the GPU as it was.
fn undo_enable(
    backend: &mut dyn MigBackend,
    gpu: &GpuState,
    o: GpuOutcome,
    e: MigError,
) -> GpuOutcome {
    let note = match backend.set_mig_mode(gpu.index, false) {
        Ok(false) => "; MIG mode was set back to disabled".to_string(),
        Ok(true) => "; MIG mode set back to disabled, pending a GPU reset".to_string(),
        Err(undo) => format!("; setting MIG mode back to disabled failed too: {undo}"),
    };
    let mut o = o;
    o.status = GpuStatus::Failed(format!("{e}{note}"));
    o
}

fn fail(mut o: GpuOutcome, e: MigError) -> GpuOutcome {
    o.status = GpuStatus::Failed(e.to_string());
    o
}

/// Makes the plan's write calls; `Ok(true)` when a mode change is left pending.
fn carry_out(
    backend: &mut dyn MigBackend,
    gpu: &GpuState,
    p: &GpuPlan,
    in_use: &dyn InUse,
    opts: ApplyOptions,
) -> Result<bool, MigError> {
    if !opts.drain {
        check_holders(gpu, p, in_use)?;
    }
    for gi in &p.destroy {
        destroy_gi(backend, gpu, gi)?;
    }
    if let Some(m) = p.set_mode {
        if backend.set_mig_mode(gpu.index, m)? {
            return Ok(true);
        }
    }
    for n in &p.create {
        create_gi(backend, gpu.index, n)?;
    }
    Ok(false)
}

/// Refuses a plan that destroys a held MIG device or changes the MIG mode of a held GPU.
fn check_holders(gpu: &GpuState, p: &GpuPlan, in_use: &dyn InUse) -> Result<(), MigError> {
    for gi in &p.destroy {
        let holders = in_use.holders(gpu, gi);
        if !holders.is_empty() {
            return Err(held_error(gpu, describe_gi(gpu, gi), &holders));
        }
    }
    if let Some(on) = p.set_mode {
        let holders = in_use.gpu_holders(gpu);
        if !holders.is_empty() {
            let device = format!(
                "the GPU itself (MIG mode change to {})",
                if on { "enabled" } else { "disabled" }
            );
            return Err(held_error(gpu, device, &holders));
        }
    }
    Ok(())
}

/// A device an [`InUse`] holder holds (the driver itself would not stop the destroy).
pub(crate) fn held_error(gpu: &GpuState, device: String, holders: &[Holder]) -> MigError {
    MigError::InUse {
        index: gpu.index,
        uuid: gpu.uuid.clone(),
        device,
        holders: describe(holders),
        fix: fix_for(holders),
    }
}

/// What to do about NVML's `IN_USE` (the driver refuses; `--drain` cannot override it).
const PROCESS_FIX: &str = "stop the processes on it (nvidia-smi lists them) and apply again; the layout is kept until then";

fn nvml_in_use_error(gpu: &GpuState, gi: &GpuInstance) -> MigError {
    MigError::InUse {
        index: gpu.index,
        uuid: gpu.uuid.clone(),
        device: describe_gi(gpu, gi),
        holders: "a running process (NVML_ERROR_IN_USE)".into(),
        fix: PROCESS_FIX.into(),
    }
}

pub(crate) fn describe_gi(gpu: &GpuState, gi: &GpuInstance) -> String {
    let name = gpu
        .profile_by_id(gi.profile_id)
        .map_or("?", |p| p.name.as_str());
    let uuid = gi.cis.iter().find_map(|c| c.uuid.clone());
    match uuid {
        Some(u) => format!("{name} (GPU instance {}, {u})", gi.id),
        None => format!("{name} (GPU instance {})", gi.id),
    }
}

pub(crate) fn destroy_gi(
    backend: &mut dyn MigBackend,
    gpu: &GpuState,
    gi: &GpuInstance,
) -> Result<(), MigError> {
    let map = |e: MigError| match e {
        MigError::Nvml { code, .. } if code == NVML_ERROR_IN_USE => nvml_in_use_error(gpu, gi),
        other => other,
    };
    for ci in &gi.cis {
        backend
            .destroy_compute_instance(gpu.index, gi.id, ci.id)
            .map_err(map)?;
    }
    backend.destroy_gpu_instance(gpu.index, gi.id).map_err(map)
}

pub(crate) fn create_gi(
    backend: &mut dyn MigBackend,
    index: u32,
    n: &NewInstance,
) -> Result<(u32, Vec<u32>), MigError> {
    let gi = backend.create_gpu_instance(index, n.profile_id, Some(n.placement))?;
    let mut cis = Vec::new();
    for &slices in &n.cis {
        let ci_profile = ci_profile_id(slices).ok_or_else(|| {
            MigError::NotFound(format!("no compute instance profile has {slices} slices"))
        })?;
        cis.push(backend.create_compute_instance(index, gi, ci_profile)?);
    }
    Ok((gi, cis))
}

#[cfg(test)]
#[path = "apply_tests.rs"]
mod tests;
