//! Single MIG devices for the DRA driver's claims: create one where it fits, destroy one nobody
//! holds.

use crate::apply::{create_gi, describe_gi, destroy_gi, held_error, MigBackend};
use crate::error::MigError;
use crate::holders::InUse;
use crate::plan::NewInstance;
use crate::state::Placement;

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
            return Err(held_error(&gpu, describe_gi(&gpu, &inst), &holders));
        }
    }
    destroy_gi(backend, &gpu, &inst)
}
