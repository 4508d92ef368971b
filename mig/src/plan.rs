//! What to change on one GPU to reach its desired state: pure data, made without NVML.
//!
//! A GPU already in the desired mode with the desired devices (`mig-devices` compared as
//! canonical name -> count, mig-parted's `Equals`) gets an empty plan, so a second apply makes
//! no write call. Otherwise instances that already match a wanted one are kept where they are and
//! only the rest is destroyed and created; when the kept ones leave no room, everything is
//! recreated. A mode change comes first and, while it waits for a reset, nothing else is planned.

use std::fmt;

use crate::error::MigError;
use crate::pack::{pack, Item};
use crate::select::Desired;
use crate::state::{ci_profile_id, GpuInstance, GpuState, MigMode, Placement};

/// A GPU instance to create, with its compute instances.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewInstance {
    pub profile_id: u32,
    /// GPU instance profile name (`3g.40gb`).
    pub profile: String,
    pub placement: Placement,
    /// Compute slices of each compute instance to create in it.
    pub cis: Vec<u32>,
}

/// The changes for one GPU, in the order they are made.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GpuPlan {
    pub index: u32,
    pub uuid: String,
    pub model: String,
    /// Set MIG mode to this first.
    pub set_mode: Option<bool>,
    /// The mode change waits for a reset/reboot: the layout is planned after it.
    pub pending_mode: bool,
    /// GPU instances to destroy (their compute instances first), by id.
    pub destroy: Vec<GpuInstance>,
    /// GPU instances to create, largest first.
    pub create: Vec<NewInstance>,
    /// GPU instance ids left as they are.
    pub keep: Vec<u32>,
}

impl GpuPlan {
    /// Nothing to do.
    pub fn is_noop(&self) -> bool {
        self.set_mode.is_none() && self.destroy.is_empty() && self.create.is_empty()
    }
}

fn want_instances(gpu: &GpuState, desired: &Desired) -> Result<Vec<(u32, Vec<u32>)>, MigError> {
    let mut out = Vec::new();
    // Largest first: G descending, then C, then name (mig-parted's flatten order).
    let mut wanted: Vec<_> = desired.devices.iter().collect();
    wanted.sort_by(|a, b| {
        (b.0.gpu, b.0.compute)
            .cmp(&(a.0.gpu, a.0.compute))
            .then(a.0.cmp(b.0))
    });
    for (p, &count) in wanted {
        let unknown = || MigError::UnknownProfile {
            index: gpu.index,
            uuid: gpu.uuid.clone(),
            model: gpu.model.clone(),
            profile: p.to_string(),
            available: gpu.profile_names(),
        };
        let gi = gpu.profile(&p.gi_name()).ok_or_else(unknown)?;
        if p.compute > gi.slices || ci_profile_id(p.compute).is_none() || p.compute == 0 {
            return Err(unknown());
        }
        let per_gi = (gi.slices / p.compute).max(1);
        let mut left = count;
        while left > 0 {
            let n = left.min(per_gi);
            out.push((gi.id, vec![p.compute; n as usize]));
            left -= n;
        }
    }
    Ok(out)
}

fn same(gi: &GpuInstance, want: &(u32, Vec<u32>)) -> bool {
    let mut have: Vec<u32> = gi.cis.iter().map(|c| c.slices).collect();
    have.sort_unstable();
    let mut w = want.1.clone();
    w.sort_unstable();
    gi.profile_id == want.0 && have == w
}

/// The plan that takes `gpu` to `desired`.
pub fn plan(gpu: &GpuState, desired: &Desired) -> Result<GpuPlan, MigError> {
    let mut p = GpuPlan {
        index: gpu.index,
        uuid: gpu.uuid.clone(),
        model: gpu.model.clone(),
        ..GpuPlan::default()
    };
    let MigMode::Capable { current, pending } = gpu.mig else {
        return Ok(p);
    };
    if current != desired.mig_enabled {
        if !current || gpu.instances.is_empty() {
            p.pending_mode = pending == desired.mig_enabled && pending != current;
            if !p.pending_mode {
                p.set_mode = Some(desired.mig_enabled);
            }
            return Ok(p);
        }
        p.destroy = gpu.instances.clone();
        p.set_mode = Some(false);
        return Ok(p);
    }
    if pending != current {
        // An earlier request for the other mode is waiting: cancel it.
        p.set_mode = Some(current);
    }
    if !current {
        return Ok(p);
    }
    layout_plan(gpu, desired, p)
}

fn layout_plan(gpu: &GpuState, desired: &Desired, mut p: GpuPlan) -> Result<GpuPlan, MigError> {
    let wanted = want_instances(gpu, desired)?;
    let complete = gpu.instances.iter().all(|gi| !gi.cis.is_empty());
    if complete && gpu.layout() == desired.layout() {
        p.keep = gpu.instances.iter().map(|g| g.id).collect();
        return Ok(p);
    }
    let mut rest = wanted.clone();
    let mut kept = Vec::new();
    for gi in &gpu.instances {
        if let Some(i) = rest.iter().position(|w| same(gi, w)) {
            rest.remove(i);
            kept.push(gi.clone());
        }
    }
    let occupied: Vec<Placement> = kept.iter().map(|g| g.placement).collect();
    let (keep, todo, places) = match place(gpu, &rest, &occupied) {
        Some(places) => (kept, rest, places),
        None => {
            let places = place(gpu, &wanted, &[]).ok_or_else(|| MigError::DoesNotFit {
                index: gpu.index,
                uuid: gpu.uuid.clone(),
                model: gpu.model.clone(),
                wanted: describe(&desired.layout()),
            })?;
            (Vec::new(), wanted, places)
        }
    };
    p.keep = keep.iter().map(|g| g.id).collect();
    p.destroy = gpu
        .instances
        .iter()
        .filter(|g| !p.keep.contains(&g.id))
        .cloned()
        .collect();
    p.create = todo
        .into_iter()
        .zip(places)
        .map(|((profile_id, cis), placement)| NewInstance {
            profile_id,
            profile: gpu
                .profile_by_id(profile_id)
                .map(|x| x.name.clone())
                .unwrap_or_default(),
            placement,
            cis,
        })
        .collect();
    Ok(p)
}

fn place(
    gpu: &GpuState,
    wanted: &[(u32, Vec<u32>)],
    occupied: &[Placement],
) -> Option<Vec<Placement>> {
    let mut items = Vec::new();
    for (id, _) in wanted {
        let prof = gpu.profile_by_id(*id)?;
        items.push(Item {
            profile_id: *id,
            slices: prof.slices,
            placements: prof.placements.clone(),
        });
    }
    let compute: u32 = items.iter().map(|i| i.slices).sum();
    let kept_compute: u32 = gpu
        .instances
        .iter()
        .filter(|g| occupied.contains(&g.placement))
        .filter_map(|g| gpu.profile_by_id(g.profile_id).map(|p| p.slices))
        .sum();
    if gpu.compute_slices > 0 && compute + kept_compute > gpu.compute_slices {
        return None;
    }
    for prof in &gpu.profiles {
        let kept = gpu
            .instances
            .iter()
            .filter(|g| g.profile_id == prof.id && occupied.contains(&g.placement))
            .count();
        let new = items.iter().filter(|i| i.profile_id == prof.id).count();
        if kept + new > prof.instance_count as usize {
            return None;
        }
    }
    pack(&items, occupied)
}

fn describe(layout: &std::collections::BTreeMap<String, u32>) -> String {
    let parts: Vec<String> = layout.iter().map(|(k, v)| format!("{v}x {k}")).collect();
    parts.join(" + ")
}

impl fmt::Display for GpuPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let head = format!("GPU {} ({}, {})", self.index, self.uuid, self.model);
        if self.is_noop() && !self.pending_mode {
            return writeln!(f, "{head}: unchanged");
        }
        writeln!(f, "{head}:")?;
        if self.pending_mode {
            writeln!(
                f,
                "  MIG mode change pending: takes effect after a GPU reset or reboot"
            )?;
        }
        for gi in &self.destroy {
            for ci in &gi.cis {
                writeln!(
                    f,
                    "  destroy compute instance {} of GPU instance {}",
                    ci.id, gi.id
                )?;
            }
            writeln!(
                f,
                "  destroy GPU instance {} (profile id {}, placement {}:{})",
                gi.id, gi.profile_id, gi.placement.start, gi.placement.size
            )?;
        }
        if let Some(m) = self.set_mode {
            writeln!(
                f,
                "  set MIG mode {}",
                if m { "enabled" } else { "disabled" }
            )?;
        }
        for n in &self.create {
            writeln!(f, "  create GPU instance {} (profile id {}) at placement {}:{} with {} compute instance(s)", n.profile, n.profile_id, n.placement.start, n.placement.size, n.cis.len())?;
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
