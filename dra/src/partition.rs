//! Partitionable devices (KEP-4815, gate DRAPartitionableDevices: alpha 1.33, beta and on in
//! 1.36; dra-facts §3): for every GPU in MIG mode, and every GPU that switches into it without a
//! reset (NVIDIA's DynamicMIG rule, [`publish_partitions`]), one counter set `gpu-<minor>-counter-set`
//! (NVIDIA's DynamicMIG name, `partitions.go`) with one counter `memory-slice-<i>` = 1 per memory
//! slice and `compute-slices` = the GPU's compute slices; the full GPU consumes all of them and
//! every (GPU-instance profile, placement) the GPU offers is a device consuming its profile's
//! compute slices and the memory slices of its placement. The scheduler so never hands out two
//! overlapping placements, nor the full GPU with any of them; the plugin creates the chosen one
//! at prepare (`dynmig.rs`), switching MIG mode as needed (`modes.rs`). The full GPU is
//! published only where it can be prepared as a GPU ([`publish_full_gpu`]).
//!
//! With NVML's profile info, the set also counts NVIDIA's capacities (`multiprocessors`,
//! `copy-engines`, `decoders`, `encoders`, `jpeg-engines`, `ofa-engines`, `memory`: the largest
//! of every profile, as NVIDIA's `inspectMigProfilesAndPlacements`), every placement consumes its
//! profile's, and the profiles with media extensions (`+me`, `+gfx`, `-me`) are published too.
//! MIG devices made by someone else are subtracted (see [`catalogue`]).
//!
//! Device names are NVIDIA's static-MIG form `gpu-<minor>-mig-<profile>-<GI profile id>-<start>`.

use std::path::Path;

use gpuhook_mig::{GiProfileInfo, GpuState, Placement};
use gpuhook_node::{DeviceRef, Inventory};
use serde_json::{json, Value};

use crate::devices::{sanitize, NodeDevice};
use crate::slot::{Engines, MigSlot, Slot, Taken};

/// `gpu-<minor>-counter-set`.
pub fn counter_set_name(minor: u32) -> String {
    format!("gpu-{minor}-counter-set")
}

/// `gpu-<minor>-mig-<profile>-<profile id>-<start>`.
pub fn slot_name(minor: u32, profile: &str, profile_id: u32, start: u32) -> String {
    format!("gpu-{minor}-mig-{}-{profile_id}-{start}", sanitize(profile))
}

fn mig_device(base: &NodeDevice, g: &gpuhook_node::Gpu, slot: Slot, mem_mib: u64) -> NodeDevice {
    let Some(m) = slot.mig.clone() else {
        return base.clone();
    };
    let mut a = base.attributes.clone();
    for k in ["uuid", "index", "minor"] {
        a.remove(k);
    }
    a.insert("type".into(), json!({ "string": "mig" }));
    a.insert("parentUUID".into(), json!({ "string": g.uuid }));
    a.insert("parentIndex".into(), json!({ "int": g.index }));
    a.insert("parentMinor".into(), json!({ "int": g.minor }));
    a.insert("profile".into(), json!({ "string": m.profile }));
    NodeDevice {
        name: slot_name(g.minor, &m.profile, m.profile_id, m.placement.start),
        dev: DeviceRef::Gpu { index: g.index },
        uuid: String::new(),
        gpu_uuid: g.uuid.clone(),
        memory_bytes: mem_mib << 20,
        attributes: a,
        slot: Some(slot),
    }
}

/// The devices of `inv` with every MIG-mode GPU (as `states`, from the MIG manager's backend)
/// replaced by its partitionable form: the full GPU and every placement of every profile (media
/// profiles only when NVML gave their engine counts). MIG devices that exist and are not in
/// `owned` ((GPU index, GPU-instance id) of those this plugin made for prepared claims) were made
/// by someone else (the MIG manager, an admin): their placements and every one overlapping them
/// are not offered and their counters are taken from the GPU's set. Other GPUs are as in
/// [`crate::devices::catalogue`].
pub fn catalogue(
    inv: &Inventory,
    states: &[GpuState],
    sys_root: &Path,
    owned: &[(u32, u32)],
) -> Vec<NodeDevice> {
    let mut whole = inv.clone();
    for g in &mut whole.gpus {
        g.mig_enabled = false;
        g.mig_devices.clear();
    }
    let fulls = crate::devices::catalogue(&whole, sys_root);
    let mut out = Vec::new();
    for (g, full) in inv.gpus.iter().zip(fulls) {
        let toggles = toggles_mig(g.architecture.as_deref());
        let state = states
            .iter()
            .find(|s| s.uuid == g.uuid && !s.profiles.is_empty())
            .filter(|s| publish_partitions(s.mig, toggles));
        match state {
            Some(state) => out.extend(gpu_devices(g, full, state, owned, toggles)),
            None => out.extend(crate::devices::catalogue(&single(inv, g), sys_root)),
        }
    }
    out
}

/// Whether a GPU of `architecture` switches MIG mode without a GPU reset: NVIDIA's
/// `supportsMIGModeToggle` (`cmd/gpu-kubelet-plugin/nvlib.go`: NVML architecture Hopper or
/// newer; Ampere's switch waits for a reset; an unknown architecture does not).
pub fn toggles_mig(architecture: Option<&str>) -> bool {
    matches!(
        architecture.map(str::to_ascii_lowercase).as_deref(),
        Some("hopper" | "blackwell")
    )
}

/// Whether a MIG-capable GPU is published partitionable (NVIDIA's `isDynamicMIGCapable`): in
/// MIG mode, or able to switch into it without a reset. An Ampere GPU with MIG mode off stays a
/// plain GPU.
pub fn publish_partitions(mode: gpuhook_mig::MigMode, toggles: bool) -> bool {
    mode.enabled() || (toggles && mode != gpuhook_mig::MigMode::NotCapable)
}

/// Whether the full GPU of a partitionable GPU is published (NVIDIA's
/// `GetPerGpuAllocatableDevices`): only where it can be prepared as a working GPU, i.e. its MIG
/// mode is off or can be switched off without a reset. Its counter set is published either way.
pub fn publish_full_gpu(mode: gpuhook_mig::MigMode, toggles: bool) -> bool {
    !mode.enabled() || toggles
}

/// The partitionable catalogue of the node now: each GPU's MIG state read through `p` and the
/// records of `claims` (the checkpoint's claims holding MIG devices) taken **under the MIG
/// lock**. A MIG device this plugin makes or destroys is recorded in its claim's checkpoint
/// entry before NVML is asked, under that lock (`dynmig.rs`), so every instance seen here is
/// either named by a record (its claim's: its placement stays offered, the claim consumes it)
/// or made by someone else (subtracted): the plugin's own creates and destroys never change
/// the catalogue, however they interleave with this read.
pub fn read(
    p: &crate::dynmig::Partitioner,
    claims: impl FnOnce() -> Vec<crate::checkpoint::ClaimEntry>,
    inv: &Inventory,
    sys_root: &Path,
) -> Result<Vec<NodeDevice>, String> {
    let (states, owned) = p.with(|b| {
        let states = b.gpus().map_err(|e| format!("MIG state: {e}"))?;
        let owned = crate::dynmig::owned(claims().iter(), &states);
        Ok::<_, String>((states, owned))
    })?;
    Ok(catalogue(inv, &states, sys_root, &owned))
}

/// A profile's engines, when NVML gave them.
fn engines_of(p: &GiProfileInfo) -> Option<Engines> {
    p.engines.as_ref().map(|e| Engines::of(e, p.memory_mib))
}

/// What the instances of `state` not in `owned` hold, and their placements.
fn foreign(state: &GpuState, owned: &[(u32, u32)]) -> (Taken, Vec<Placement>) {
    let mut t = Taken::default();
    let mut at = Vec::new();
    for gi in &state.instances {
        if owned.contains(&(state.index, gi.id)) {
            continue;
        }
        at.push(gi.placement);
        t.memory_slices
            .extend(gi.placement.start..gi.placement.end());
        if let Some(p) = state.profile_by_id(gi.profile_id) {
            t.compute_slices += p.slices;
            t.engines = add(t.engines, engines_of(p).unwrap_or_default());
        }
    }
    (t, at)
}

fn add(a: Engines, b: Engines) -> Engines {
    Engines {
        multiprocessors: a.multiprocessors + b.multiprocessors,
        copy_engines: a.copy_engines + b.copy_engines,
        decoders: a.decoders + b.decoders,
        encoders: a.encoders + b.encoders,
        jpeg_engines: a.jpeg_engines + b.jpeg_engines,
        ofa_engines: a.ofa_engines + b.ofa_engines,
        memory_bytes: a.memory_bytes + b.memory_bytes,
    }
}

/// The full GPU and the placements of one MIG-mode GPU.
fn gpu_devices(
    g: &gpuhook_node::Gpu,
    mut full: NodeDevice,
    state: &GpuState,
    owned: &[(u32, u32)],
    toggles: bool,
) -> Vec<NodeDevice> {
    let set = counter_set_name(g.minor);
    let mem_slices = state
        .profiles
        .iter()
        .flat_map(|p| p.placements.iter().map(Placement::end))
        .max()
        .unwrap_or(0);
    let known: Option<Vec<Engines>> = state.profiles.iter().map(engines_of).collect();
    let gpu_engines = known.and_then(|v| v.into_iter().reduce(Engines::max));
    let (taken, busy) = foreign(state, owned);
    full.slot = Some(Slot {
        gpu_index: state.index,
        counter_set: set.clone(),
        memory_slices: 0..mem_slices,
        compute_slices: state.compute_slices,
        engines: gpu_engines,
        mig: None,
        taken: (!busy.is_empty()).then(|| Box::new(taken)),
        toggles,
        offered: publish_full_gpu(state.mig, toggles),
    });
    let mut out = vec![full.clone()];
    let publishable = |p: &&GiProfileInfo| {
        !p.name.contains(['+', '-']) || (gpu_engines.is_some() && p.engines.is_some())
    };
    for p in state.profiles.iter().filter(publishable) {
        for pl in p
            .placements
            .iter()
            .filter(|pl| !busy.iter().any(|b| b.overlaps(pl)))
        {
            let slot = Slot {
                gpu_index: state.index,
                counter_set: set.clone(),
                memory_slices: pl.start..pl.end(),
                compute_slices: p.slices,
                engines: gpu_engines.and(engines_of(p)),
                mig: Some(MigSlot {
                    profile: p.name.clone(),
                    profile_id: p.id,
                    placement: *pl,
                }),
                taken: None,
                toggles,
                offered: true,
            };
            out.push(mig_device(&full, g, slot, p.memory_mib));
        }
    }
    out
}

/// `inv` with only GPU `g`.
fn single(inv: &Inventory, g: &gpuhook_node::Gpu) -> Inventory {
    let mut one = inv.clone();
    one.gpus = vec![g.clone()];
    one
}

/// The counter sets of `devices`: one per full GPU with a slot (it consumes everything).
pub fn counter_sets(devices: &[NodeDevice]) -> Vec<Value> {
    devices
        .iter()
        .filter_map(|d| d.slot.as_ref().filter(|s| s.mig.is_none()))
        .map(|s| json!({ "name": s.counter_set, "counters": s.set_counters() }))
        .collect()
}

#[cfg(test)]
#[path = "partition_tests.rs"]
mod tests;
