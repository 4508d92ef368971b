//! Partitionable devices (KEP-4815, gate DRAPartitionableDevices: alpha 1.33, beta and on in
//! 1.36; dra-facts §3): for every GPU in MIG mode, one counter set `gpu-<minor>-counter-set`
//! (NVIDIA's DynamicMIG name, `partitions.go`) with one counter `memory-slice-<i>` = 1 per memory
//! slice and `compute-slices` = the GPU's compute slices; the full GPU consumes all of them and
//! every (GPU-instance profile, placement) the GPU offers is a device consuming its profile's
//! compute slices and the memory slices of its placement. The scheduler so never hands out two
//! overlapping placements; the plugin creates the chosen one at prepare (`dynmig.rs`).
//!
//! Device names are NVIDIA's static-MIG form `gpu-<minor>-mig-<profile>-<GI profile id>-<start>`.
//! Differences from NVIDIA: no SM/engine counters (the MIG manager's state has no engine counts),
//! so profiles with media extensions (`+me`, `+gfx`, `-me`) are not published.

use std::path::Path;

use gpuhook_mig::{GpuState, Placement};
use gpuhook_node::{DeviceRef, Inventory};
use serde_json::{json, Value};

use crate::devices::{sanitize, NodeDevice};
use crate::slot::{MigSlot, Slot};

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
/// replaced by its partitionable form: the full GPU and every placement of every plain profile.
/// Other GPUs are as in [`crate::devices::catalogue`].
pub fn catalogue(inv: &Inventory, states: &[GpuState], sys_root: &Path) -> Vec<NodeDevice> {
    let mut whole = inv.clone();
    for g in &mut whole.gpus {
        g.mig_enabled = false;
        g.mig_devices.clear();
    }
    let fulls = crate::devices::catalogue(&whole, sys_root);
    let mut out = Vec::new();
    for (g, full) in inv.gpus.iter().zip(fulls) {
        let state = states
            .iter()
            .find(|s| s.uuid == g.uuid && s.mig.enabled() && !s.profiles.is_empty());
        let Some(state) = state else {
            out.extend(crate::devices::catalogue(&single(inv, g), sys_root));
            continue;
        };
        let set = counter_set_name(g.minor);
        let mem_slices = state
            .profiles
            .iter()
            .flat_map(|p| p.placements.iter().map(Placement::end))
            .max()
            .unwrap_or(0);
        let mut f = full.clone();
        f.slot = Some(Slot {
            gpu_index: state.index,
            counter_set: set.clone(),
            memory_slices: 0..mem_slices,
            compute_slices: state.compute_slices,
            mig: None,
        });
        out.push(f);
        for p in state
            .profiles
            .iter()
            .filter(|p| !p.name.contains(['+', '-']))
        {
            for pl in &p.placements {
                let slot = Slot {
                    gpu_index: state.index,
                    counter_set: set.clone(),
                    memory_slices: pl.start..pl.end(),
                    compute_slices: p.slices,
                    mig: Some(MigSlot {
                        profile: p.name.clone(),
                        profile_id: p.id,
                        placement: *pl,
                    }),
                };
                out.push(mig_device(&full, g, slot, p.memory_mib));
            }
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
        .map(|s| json!({ "name": s.counter_set, "counters": s.counters() }))
        .collect()
}

#[cfg(test)]
#[path = "partition_tests.rs"]
mod tests;
