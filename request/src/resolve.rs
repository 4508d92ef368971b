//! Turning requested ids into [`DeviceRef`]s of an [`Inventory`].
//!
//! As libnvidia-container (`src/cli/common.c`, `select_devices`): `all` is every GPU
//! (`select_all_gpu_devices`, MIG-enabled or not) and every MIG device
//! (`select_all_mig_devices`); an index, `GPU-` UUID or PCI bus id of a MIG-enabled GPU selects
//! that GPU (`select_gpu_device` does not look at MIG mode): its `/dev/nvidia<minor>`, without
//! MIG caps. NVIDIA's device plugin with MIG strategy `none` hands out exactly such UUIDs.
//! Selecting a MIG device implies its parent's device node; that is the CDI edits' business, here
//! we only return refs. An id that resolves to nothing is an error that lists (a bounded number
//! of) the ids that do exist.

use std::collections::HashSet;

use gpuhook_node::{DeviceRef, Gpu, Inventory, MigDevice};

use super::cdi_name::QualifiedName;
use super::devices::{normalize_pci_bus_id, parse_id, DeviceId, DeviceSelection};
use super::error::{preview, RequestError, RequestSource};

/// Devices of a selection, deduplicated, in request order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResolvedDevices {
    pub devices: Vec<DeviceRef>,
    /// CDI names of other kinds (not `kind`): not ours to inject, reported for the caller to log.
    pub foreign_cdi: Vec<QualifiedName>,
}

/// Every GPU and every MIG device, in inventory order (each GPU, then its MIG devices).
pub fn all_devices(inv: &Inventory) -> Vec<DeviceRef> {
    let mut out = Vec::new();
    for g in &inv.gpus {
        out.push(DeviceRef::Gpu { index: g.index });
        out.extend(g.mig_devices.iter().map(|m| mig_ref(g, m)));
    }
    out
}

fn mig_ref(g: &Gpu, m: &MigDevice) -> DeviceRef {
    DeviceRef::Mig {
        parent_index: g.index,
        index: m.index,
    }
}

/// Resolves `selection` against `inv`; CDI names of kind `kind` (`nvidia.com/gpu`) are ours.
pub fn resolve_selection(
    selection: &DeviceSelection,
    inv: &Inventory,
    origin: RequestSource,
    kind: &str,
) -> Result<ResolvedDevices, RequestError> {
    let mut out = ResolvedDevices::default();
    let mut seen = HashSet::new();
    let mut push = |out: &mut ResolvedDevices, r: DeviceRef| {
        if seen.insert(r) {
            out.devices.push(r);
        }
    };
    match selection {
        DeviceSelection::None => {}
        DeviceSelection::All => all_devices(inv).into_iter().for_each(|r| push(&mut out, r)),
        DeviceSelection::Ids(ids) => {
            for id in ids {
                match id {
                    DeviceId::Cdi(q) if !q.is_kind(kind) => {
                        if !out.foreign_cdi.contains(q) {
                            out.foreign_cdi.push(q.clone());
                        }
                    }
                    DeviceId::Cdi(q) if q.name == "all" => {
                        all_devices(inv).into_iter().for_each(|r| push(&mut out, r));
                    }
                    DeviceId::Cdi(q) => {
                        let inner = parse_id(&q.name, origin)?;
                        let r = resolve_id(&inner, inv, origin)
                            .map_err(|e| rename_unknown(e, &q.to_string()))?;
                        push(&mut out, r);
                    }
                    other => push(&mut out, resolve_id(other, inv, origin)?),
                }
            }
        }
    }
    Ok(out)
}

/// Reports an unknown CDI name under the name the user wrote.
fn rename_unknown(e: RequestError, name: &str) -> RequestError {
    match e {
        RequestError::UnknownDevice { origin, hint, .. } => RequestError::UnknownDevice {
            id: preview(name),
            origin,
            hint,
        },
        other => other,
    }
}

/// Resolves one bare id.
pub fn resolve_id(
    id: &DeviceId,
    inv: &Inventory,
    origin: RequestSource,
) -> Result<DeviceRef, RequestError> {
    let whole = |g: &Gpu| Ok(DeviceRef::Gpu { index: g.index });
    let mig_at = |gpu: u32, mig: u32| {
        let g = inv.gpu(gpu)?;
        g.mig_devices
            .iter()
            .find(|m| m.index == mig)
            .map(|m| mig_ref(g, m))
    };
    let found = match id {
        DeviceId::Index(i) => inv.gpu(*i).map(whole),
        DeviceId::GpuUuid(u) => inv
            .gpus
            .iter()
            .find(|g| g.uuid.eq_ignore_ascii_case(u))
            .map(whole),
        DeviceId::PciBusId(p) => inv
            .gpus
            .iter()
            .find(|g| normalize_pci_bus_id(&g.pci_bus_id).is_some_and(|n| n == *p))
            .map(whole),
        DeviceId::MigUuid(u) => inv.gpus.iter().find_map(|g| {
            g.mig_devices
                .iter()
                .find(|m| m.uuid.eq_ignore_ascii_case(u))
                .map(|m| Ok(mig_ref(g, m)))
        }),
        DeviceId::MigLegacy { gpu_uuid, gi, ci } => inv
            .gpus
            .iter()
            .find(|g| g.uuid.eq_ignore_ascii_case(gpu_uuid))
            .and_then(|g| {
                g.mig_devices
                    .iter()
                    .find(|m| m.gi_id == *gi && m.ci_id == *ci)
                    .map(|m| Ok(mig_ref(g, m)))
            }),
        DeviceId::MigIndex { gpu, mig } => mig_at(*gpu, *mig).map(Ok),
        // CDI `type-index` names: `gpu<N>` and `mig<N>:<M>`.
        DeviceId::Name(n) => type_index_name(n).and_then(|(gpu, mig)| match mig {
            None => inv.gpu(gpu).map(whole),
            Some(mig) => mig_at(gpu, mig).map(Ok),
        }),
        DeviceId::Cdi(q) => {
            return Err(RequestError::UnknownDevice {
                id: preview(&q.to_string()),
                origin,
                hint: hint(inv),
            })
        }
    };
    found.unwrap_or_else(|| {
        Err(RequestError::UnknownDevice {
            id: preview(&id.to_string()),
            origin,
            hint: hint(inv),
        })
    })
}

/// `gpu3` → (3, None); `mig3:1` → (3, Some(1)).
fn type_index_name(name: &str) -> Option<(u32, Option<u32>)> {
    let digits = |s: &str| {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    };
    if let Some(rest) = name.strip_prefix("gpu") {
        return digits(rest).map(|i| (i, None));
    }
    let (gpu, mig) = name.strip_prefix("mig")?.split_once(':')?;
    Some((digits(gpu)?, Some(digits(mig)?)))
}

/// Most device ids an unknown-device error lists.
const MAX_IDS_SHOWN: usize = 16;

/// What this node has, for an unknown-device error: each GPU's index and UUID, each MIG device's
/// `N:M` and UUID (at most [`MAX_IDS_SHOWN`], then a count).
fn hint(inv: &Inventory) -> String {
    let mut ids: Vec<String> = Vec::new();
    for g in &inv.gpus {
        let mig = if g.mig_enabled { ", MIG enabled" } else { "" };
        ids.push(format!("{} ({}{mig})", g.index, g.uuid));
        for m in &g.mig_devices {
            ids.push(format!("{}:{} ({})", g.index, m.index, m.uuid));
        }
    }
    let migs: usize = inv.gpus.iter().map(|g| g.mig_devices.len()).sum();
    let listed = if ids.is_empty() {
        String::new()
    } else {
        format!(
            ": {}",
            gpuhook_node::bounded::preview_list(&ids, MAX_IDS_SHOWN)
        )
    };
    format!(
        "this node has {} GPU(s) and {migs} MIG device(s){listed}; use one of these indexes or \
         UUIDs, a PCI bus id, all or none (nvidia-smi -L lists them)",
        inv.gpus.len(),
    )
}

#[cfg(test)]
#[path = "resolve_tests.rs"]
mod tests;
