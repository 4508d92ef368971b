//! Carrying plans out through a [`MigBackend`], GPU by GPU.
//!
//! Each GPU is planned from what the backend reads *now* and changed on its own: a failure on
//! one GPU never touches another. A step that is cut short (crash, kill, NVML error) leaves
//! instances that the next run reads and plans from again; a GPU instance without its compute
//! instances counts as "not what was asked" and is recreated. Destroying a MIG device that is
//! in use (an [`InUse`] holder, or NVML's `IN_USE`) is refused unless the caller drains.

use crate::error::{MigError, NVML_ERROR_IN_USE};
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

/// Who holds a MIG device besides what NVML reports (the device plugin's pod-resources
/// allocations, MPS clients): filled by the Kubernetes agent. An empty list: nobody.
pub trait InUse {
    fn holders(&self, gpu: &GpuState, gi: &GpuInstance) -> Vec<String>;
}

/// Nobody holds anything (the CLI without an agent: NVML's own `IN_USE` still protects).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoHolders;

impl InUse for NoHolders {
    fn holders(&self, _: &GpuState, _: &GpuInstance) -> Vec<String> {
        Vec::new()
    }
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
    let mut gpu = gpu;
    // At most: a mode plan, then a layout plan on the re-read GPU.
    for _ in 0..2 {
        let p = match plan(&gpu, d) {
            Ok(p) => p,
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
        for gi in &p.destroy {
            let holders = in_use.holders(gpu, gi);
            if !holders.is_empty() {
                return Err(in_use_error(gpu, gi, holders.join(", ")));
            }
        }
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

fn in_use_error(gpu: &GpuState, gi: &GpuInstance, holders: String) -> MigError {
    MigError::InUse {
        index: gpu.index,
        uuid: gpu.uuid.clone(),
        device: describe_gi(gpu, gi),
        holders,
    }
}

fn describe_gi(gpu: &GpuState, gi: &GpuInstance) -> String {
    let name = gpu
        .profile_by_id(gi.profile_id)
        .map_or("?", |p| p.name.as_str());
    let uuid = gi.cis.iter().find_map(|c| c.uuid.clone());
    match uuid {
        Some(u) => format!("{name} (GPU instance {}, {u})", gi.id),
        None => format!("{name} (GPU instance {})", gi.id),
    }
}

fn destroy_gi(
    backend: &mut dyn MigBackend,
    gpu: &GpuState,
    gi: &GpuInstance,
) -> Result<(), MigError> {
    let map = |e: MigError| match e {
        MigError::Nvml { code, .. } if code == NVML_ERROR_IN_USE => {
            in_use_error(gpu, gi, "a running process (NVML_ERROR_IN_USE)".into())
        }
        other => other,
    };
    for ci in &gi.cis {
        backend
            .destroy_compute_instance(gpu.index, gi.id, ci.id)
            .map_err(map)?;
    }
    backend.destroy_gpu_instance(gpu.index, gi.id).map_err(map)
}

fn create_gi(
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

/// A MIG device made by [`create_instance`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatedDevice {
    pub gpu: u32,
    pub gpu_instance: u32,
    pub compute_instance: u32,
    pub placement: Placement,
    /// Its UUID, read back from the backend.
    pub uuid: Option<String>,
}

/// Creates one MIG device (a GPU instance and one compute instance spanning it) of profile
/// `profile` (`1g.10gb`, `1c.2g.20gb`) on GPU `index`, at `start` or at the place the planner
/// picks among the free ones. For the DRA driver's claims.
pub fn create_instance(
    backend: &mut dyn MigBackend,
    index: u32,
    profile: &str,
    start: Option<u32>,
) -> Result<CreatedDevice, MigError> {
    let gpu = backend.gpu(index)?;
    let p = crate::profile::MigProfile::parse(profile)
        .map_err(|e| MigError::NotFound(e.to_string()))?;
    let unknown = || MigError::UnknownProfile {
        index,
        uuid: gpu.uuid.clone(),
        model: gpu.model.clone(),
        profile: profile.to_string(),
        available: gpu.profile_names(),
    };
    let gi_prof = gpu.profile(&p.gi_name()).ok_or_else(unknown)?;
    let occupied: Vec<Placement> = gpu.instances.iter().map(|g| g.placement).collect();
    let mut item = crate::pack::Item {
        profile_id: gi_prof.id,
        slices: gi_prof.slices,
        placements: gi_prof.placements.clone(),
    };
    if let Some(s) = start {
        item.placements.retain(|pl| pl.start == s);
    }
    let placement = crate::pack::pack(std::slice::from_ref(&item), &occupied)
        .map(|v| v[0])
        .ok_or_else(|| MigError::DoesNotFit {
            index,
            uuid: gpu.uuid.clone(),
            model: gpu.model.clone(),
            wanted: format!(
                "{profile} (beside the existing instances{})",
                start.map(|s| format!(", at slice {s}")).unwrap_or_default()
            ),
        })?;
    let n = NewInstance {
        profile_id: gi_prof.id,
        profile: gi_prof.name.clone(),
        placement,
        cis: vec![p.compute],
    };
    let (gi, cis) = create_gi(backend, index, &n)?;
    let after = backend.gpu(index)?;
    let uuid = after
        .instances
        .iter()
        .find(|g| g.id == gi)
        .and_then(|g| g.cis.first())
        .and_then(|c| c.uuid.clone());
    Ok(CreatedDevice {
        gpu: index,
        gpu_instance: gi,
        compute_instance: cis[0],
        placement,
        uuid,
    })
}

/// Destroys GPU instance `gi` of GPU `index` with its compute instances, unless someone holds
/// it (`drain` destroys anyway).
pub fn destroy_instance(
    backend: &mut dyn MigBackend,
    index: u32,
    gi: u32,
    in_use: &dyn InUse,
    drain: bool,
) -> Result<(), MigError> {
    let gpu = backend.gpu(index)?;
    let inst = gpu
        .instances
        .iter()
        .find(|g| g.id == gi)
        .cloned()
        .ok_or_else(|| {
            MigError::NotFound(format!(
                "GPU {index} ({}) has no GPU instance {gi}",
                gpu.uuid
            ))
        })?;
    if !drain {
        let holders = in_use.holders(&gpu, &inst);
        if !holders.is_empty() {
            return Err(in_use_error(&gpu, &inst, holders.join(", ")));
        }
    }
    destroy_gi(backend, &gpu, &inst)
}

/// Whether every GPU the config selects is in its desired state (mig-parted's `assert`: a GPU no
/// entry covers fails it too). `mode_only` checks MIG modes only.
pub fn assert_applied(
    gpus: &[GpuState],
    entries: &[MigConfigSpec],
    mode_only: bool,
) -> Result<Vec<String>, MigError> {
    let desired = select(entries, gpus)?;
    let mut problems = Vec::new();
    for g in gpus {
        let covered = entries.iter().any(|e| crate::select::entry_matches(e, g));
        if !covered {
            problems.push(format!(
                "GPU {} ({}): no entry of the config covers it",
                g.index, g.uuid
            ));
        }
    }
    for d in &desired {
        let Some(g) = gpus.iter().find(|g| g.index == d.index) else {
            continue;
        };
        if g.mig.enabled() != d.mig_enabled || g.mig.pending_change() {
            problems.push(format!(
                "GPU {} ({}): MIG mode is {}, wanted {}",
                g.index,
                g.uuid,
                mode_word(g.mig.enabled()),
                mode_word(d.mig_enabled)
            ));
            continue;
        }
        if !mode_only
            && d.mig_enabled
            && (g.layout() != d.layout() || g.instances.iter().any(|i| i.cis.is_empty()))
        {
            problems.push(format!(
                "GPU {} ({}): has {:?}, wanted {:?}",
                g.index,
                g.uuid,
                g.layout(),
                d.layout()
            ));
        }
    }
    Ok(problems)
}

fn mode_word(b: bool) -> &'static str {
    if b {
        "enabled"
    } else {
        "disabled"
    }
}

#[cfg(test)]
#[path = "apply_tests.rs"]
mod tests;
