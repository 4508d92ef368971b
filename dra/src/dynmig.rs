//! MIG devices made at prepare time for partitionable devices (`partition.rs`) through the MIG
//! manager's library (`gpuhook_mig::create_instance` / `destroy_instance`), and destroyed at
//! unprepare.
//!
//! Crash safety: per placement, under one lock, (1) the GPU is read and a placement already
//! taken is refused with nothing recorded; (2) the claim's checkpoint entry records the
//! placement as `creating` before NVML is asked; (3) the created GPU/compute instance ids are
//! recorded. A restart between (2) and (3) finds `creating` without ids: the instance at exactly
//! that placement and profile is the claim's (the placement was free under the lock at (1)) and
//! is destroyed by the rollback. A destroy honours NVML's `IN_USE` (a device held by a process
//! is never destroyed; the claim's own MPS daemon is stopped first).

use std::sync::Mutex;

use gpuhook_mig::{create_instance, destroy_instance, MigBackend, MigError, NoHolders};
use gpuhook_node::{DiscoverOptions, Inventory};
use serde::{Deserialize, Serialize};

use crate::devices::NodeDevice;
use crate::slot::{MigSlot, Slot};

/// One MIG device of a claim, in its checkpoint entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MigRecord {
    /// The published device it realises.
    pub device: String,
    pub gpu: u32,
    pub profile_id: u32,
    pub start: u32,
    pub size: u32,
    /// NVML was asked to create it (it may exist without ids after a crash).
    pub creating: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_instance: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_instance: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
}

/// The MIG backend and how to re-read the node after a change.
pub struct Partitioner {
    backend: Mutex<Box<dyn MigBackend + Send>>,
    discover: DiscoverOptions,
    /// Where the GPUs whose MIG mode this plugin switched on are marked (`modes.rs`).
    marks: Option<std::path::PathBuf>,
}

impl std::fmt::Debug for Partitioner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Partitioner")
            .field("discover", &self.discover)
            .finish_non_exhaustive()
    }
}

impl Partitioner {
    pub fn new(backend: Box<dyn MigBackend + Send>, discover: DiscoverOptions) -> Self {
        Partitioner {
            backend: Mutex::new(backend),
            discover,
            marks: None,
        }
    }

    /// Marks the GPUs whose MIG mode the plugin switches on in `dir` (the plugin dir's
    /// `mig-mode/`), so it switches them off again with their last MIG device, also after a
    /// restart. Without it, the plugin never switches a GPU's MIG mode off after a placement.
    pub fn with_marks(mut self, dir: std::path::PathBuf) -> Self {
        self.marks = Some(dir);
        self
    }

    /// Makes the full GPUs among `devices` usable as GPUs (MIG mode off: `modes.rs`), under
    /// the lock; an error names the GPU and why, nothing else is changed.
    pub fn prepare_full<'a>(
        &self,
        devices: impl Iterator<Item = &'a NodeDevice>,
    ) -> Result<(), String> {
        let slots = devices.filter_map(|d| d.slot.as_ref().filter(|s| s.mig.is_none()));
        let mut b = self.backend.lock().unwrap_or_else(|p| p.into_inner());
        for s in slots {
            crate::modes::full_gpu(b.as_mut(), s, self.marks.as_deref())?;
        }
        Ok(())
    }

    /// Runs `f` on the backend under the lock.
    pub fn with<T>(&self, f: impl FnOnce(&mut dyn MigBackend) -> T) -> T {
        let mut b = self.backend.lock().unwrap_or_else(|p| p.into_inner());
        f(b.as_mut())
    }

    /// Creates the MIG device of `rec` (`slot` gives its profile); `persist` saves the record
    /// before NVML is asked and again with the ids. A taken placement: an error, nothing made.
    /// A GPU with MIG mode off is switched on first (`modes.rs`), and off again if the create
    /// fails.
    pub fn create(
        &self,
        rec: &mut MigRecord,
        full: &Slot,
        persist: &mut dyn FnMut(&MigRecord) -> Result<(), String>,
    ) -> Result<(), String> {
        let slot = full.mig.as_ref().ok_or("not a MIG placement")?;
        let mut b = self.backend.lock().unwrap_or_else(|p| p.into_inner());
        let marks = self.marks.as_deref();
        let mut gpu = b.gpu(rec.gpu).map_err(|e| e.to_string())?;
        if !gpu.mig.enabled() {
            crate::modes::switch_on(b.as_mut(), &gpu, full, marks)?;
            gpu = b.gpu(rec.gpu).map_err(|e| e.to_string())?;
        }
        let r = Self::create_at(b.as_mut(), &gpu, rec, slot, persist);
        if r.is_err() {
            crate::modes::maybe_off(b.as_mut(), rec.gpu, marks);
        }
        r
    }

    fn create_at(
        b: &mut dyn MigBackend,
        gpu: &gpuhook_mig::GpuState,
        rec: &mut MigRecord,
        slot: &MigSlot,
        persist: &mut dyn FnMut(&MigRecord) -> Result<(), String>,
    ) -> Result<(), String> {
        if let Some(other) = gpu
            .instances
            .iter()
            .find(|g| g.placement.overlaps(&slot.placement))
        {
            return Err(format!(
                "placement {}..{} of GPU {} ({}) is already taken by GPU instance {} (profile id {} at {}..{}): \
                 another MIG device was created outside this driver; destroy it or let the scheduler pick another placement",
                slot.placement.start, slot.placement.end(), rec.gpu, gpu.uuid, other.id,
                other.profile_id, other.placement.start, other.placement.end()
            ));
        }
        rec.creating = true;
        persist(rec)?;
        match create_instance(b, rec.gpu, &slot.profile, Some(slot.placement.start)) {
            Ok(c) => {
                rec.gpu_instance = Some(c.gpu_instance);
                rec.compute_instance = Some(c.compute_instance);
                rec.uuid = c.uuid;
                persist(rec)
            }
            Err(e) => {
                rec.creating = false;
                if let Err(p) = persist(rec) {
                    tracing::warn!(error = %p, "checkpoint after a failed MIG create");
                }
                Err(format!(
                    "creating {} at slice {}: {e}",
                    slot.profile, slot.placement.start
                ))
            }
        }
    }

    /// Destroys the MIG device of `rec` if it exists (a record that never reached NVML: nothing).
    pub fn destroy(&self, rec: &MigRecord) -> Result<(), String> {
        if !rec.creating && rec.gpu_instance.is_none() {
            return Ok(());
        }
        let mut b = self.backend.lock().unwrap_or_else(|p| p.into_inner());
        let gpu = b.gpu(rec.gpu).map_err(|e| e.to_string())?;
        let found = gpu.instances.iter().find(|g| match rec.gpu_instance {
            Some(id) => g.id == id,
            // The profile fixes the size; matching on it would trust one more NVML field.
            None => g.profile_id == rec.profile_id && g.placement.start == rec.start,
        });
        if let Some(gi) = found {
            match destroy_instance(b.as_mut(), rec.gpu, gi.id, &NoHolders, false) {
                Ok(()) | Err(MigError::NotFound(_)) => {}
                Err(e) => return Err(format!("destroying MIG device {}: {e}", rec.device)),
            }
        }
        crate::modes::maybe_off(b.as_mut(), rec.gpu, self.marks.as_deref());
        Ok(())
    }

    /// Switches off MIG mode of every GPU this plugin switched on that holds no MIG device any
    /// more (a crash between a destroy and its switch; at start, after the sweep).
    pub fn settle(&self) {
        let mut b = self.backend.lock().unwrap_or_else(|p| p.into_inner());
        let gpus = b
            .gpus()
            .map(|g| g.iter().map(|g| g.index).collect::<Vec<_>>());
        for i in gpus.unwrap_or_default() {
            crate::modes::maybe_off(b.as_mut(), i, self.marks.as_deref());
        }
    }

    /// The node re-read (new MIG devices with their capability nodes).
    pub fn inventory(&self) -> Result<Inventory, String> {
        gpuhook_node::discover(&self.discover)
            .map(|d| d.inventory)
            .map_err(|e| format!("node discovery after a MIG change: {e}"))
    }
}

/// (GPU index, GPU-instance id) of every instance in `states` that a checkpointed claim's record
/// names: by id, or, for a record written before NVML answered, by its profile and placement
/// (free under the lock when recorded, so the instance there is the one asked for). Everything
/// else on the GPU was made by someone else and is never destroyed by this plugin.
pub fn owned<'a>(
    claims: impl Iterator<Item = &'a crate::checkpoint::ClaimEntry>,
    states: &[gpuhook_mig::GpuState],
) -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    for r in claims.flat_map(|e| e.mig.iter()) {
        let Some(s) = states.iter().find(|s| s.index == r.gpu) else {
            continue;
        };
        let found = s.instances.iter().find(|g| match r.gpu_instance {
            Some(id) => g.id == id,
            None => r.creating && g.profile_id == r.profile_id && g.placement.start == r.start,
        });
        out.extend(found.map(|g| (r.gpu, g.id)));
    }
    out
}

/// The claim (in `busy`: device name → claim UID) that holds what partitionable device `d`
/// cannot share its GPU with: for a placement, the GPU's full GPU (the placement would switch
/// MIG mode on under it); for the full GPU, any placement of the GPU. The scheduler's counters
/// already keep them apart; this keeps a stale allocation from switching MIG mode under a claim.
pub fn gpu_conflict<'a>(
    d: &NodeDevice,
    catalogue: &[NodeDevice],
    busy: &'a std::collections::BTreeMap<String, String>,
) -> Option<&'a String> {
    let placement = d.slot.as_ref()?.mig.is_some();
    catalogue
        .iter()
        .filter(|o| o.gpu_uuid == d.gpu_uuid && o.name != d.name)
        .filter(|o| {
            o.slot
                .as_ref()
                .is_some_and(|s| s.mig.is_some() != placement)
        })
        .find_map(|o| busy.get(&o.name))
}

/// A record per planned partitionable MIG device, nothing created yet.
pub fn records<'a>(devices: impl Iterator<Item = &'a NodeDevice>) -> Vec<MigRecord> {
    devices
        .filter_map(|d| {
            let slot = d.slot.as_ref()?;
            let m = slot.mig.as_ref()?;
            Some(MigRecord {
                device: d.name.clone(),
                gpu: slot.gpu_index,
                profile_id: m.profile_id,
                start: m.placement.start,
                size: m.placement.size,
                creating: false,
                gpu_instance: None,
                compute_instance: None,
                uuid: None,
            })
        })
        .collect()
}

/// The published device of `r` as made: its MIG device in `inv` (by UUID, else by GPU instance).
pub fn made_device(inv: &Inventory, r: &MigRecord, base: &NodeDevice) -> Option<NodeDevice> {
    let g = inv.gpus.iter().find(|g| g.uuid == base.gpu_uuid)?;
    let m = g.mig_devices.iter().find(|m| match &r.uuid {
        Some(u) => &m.uuid == u,
        None => Some(m.gi_id) == r.gpu_instance,
    })?;
    let mut d = base.clone();
    d.dev = gpuhook_node::DeviceRef::Mig {
        parent_index: g.index,
        index: m.index,
    };
    d.uuid = m.uuid.clone();
    d.attributes
        .insert("uuid".into(), serde_json::json!({ "string": m.uuid }));
    Some(d)
}
