//! GetPreferredAllocation: which of the available devices the kubelet should give a container.
//!
//! NVIDIA's plugin (`internal/rm/nvml_manager.go:getPreferredAllocation`, `allocate.go`):
//! - Full GPUs (no MIG device in the resource, no replica among the available IDs): go-gpuallocator's
//!   best-effort policy (`gpuallocator/besteffort_policy.go`). Every partition of the available GPUs
//!   into sets of `size` (padded so the count divides) is scored by the sum of its sets' scores,
//!   a set's score being the sum of its pairs' link scores; the best partition that has a set
//!   holding every required GPU wins, and of its sets holding them the best is returned. It
//!   returns an empty list, not an error, when it cannot satisfy the request (the kubelet then
//!   chooses itself). Pair scores come from [`Topology::score`]; without a topology every pair
//!   scores 0 and the first set in the available order wins. The enumeration is a bounded
//!   branch-and-bound with a greedy fallback (`besteffort.rs`): NVIDIA's answer whenever the
//!   search completes within [`MAX_VISITS`] steps.
//! - Replicas or MIG devices: `greedyAlloc`. Candidates are available minus required (unknown IDs
//!   dropped); fewer than `size - required` fails with `not enough available devices to satisfy
//!   allocation`. Each step takes a candidate of the physical device the policy prefers:
//!   distributed (default) the fewest allocated replicas (total − still available, so picks in
//!   this call count), packed the most; ties go to the device picked least in this call (required
//!   IDs count as picked), then (ours, NVIDIA's order is Go map order) to advertisement order.
//!   The result is the required IDs followed by the picks.

use std::collections::{BTreeMap, HashSet};

use gpuhook_node::topology::Topology;
use gpuhook_sharing::Resource;

mod besteffort;
mod live;
pub use besteffort::MAX_VISITS;
pub use live::TopologyPreferrer;

/// `sharedDevicesAllocationPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AllocationPolicy {
    /// Spread over the least-loaded devices (NVIDIA's default).
    #[default]
    Distributed,
    /// Fill the most-loaded device first.
    Packed,
}

/// Why no preference could be computed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PreferredError {
    /// A full-GPU request named a device the resource does not advertise (NVIDIA: `no device
    /// with uuid`).
    #[error("no device with ID {id} in resource {resource}")]
    UnknownDevice { resource: String, id: String },
    /// NVIDIA's `not enough available devices to satisfy allocation`.
    #[error(
        "not enough available devices to satisfy allocation: {resource} needs {needed} more \
         besides the {required} required, {available} available"
    )]
    NotEnough {
        resource: String,
        needed: usize,
        required: usize,
        available: usize,
    },
}

/// The preferred devices for one container request, with the default (distributed) policy.
pub fn preferred(
    ad: &Resource,
    available: &[String],
    must_include: &[String],
    size: usize,
    topo: Option<&Topology>,
) -> Result<Vec<String>, PreferredError> {
    preferred_with_policy(
        ad,
        available,
        must_include,
        size,
        topo,
        AllocationPolicy::default(),
    )
}

/// [`preferred`] with an explicit policy for replicas and MIG devices (full GPUs ignore it, as
/// NVIDIA's `TestFullGPUNodeIgnoresAllocationPolicy` asserts).
pub fn preferred_with_policy(
    ad: &Resource,
    available: &[String],
    must_include: &[String],
    size: usize,
    topo: Option<&Topology>,
    policy: AllocationPolicy,
) -> Result<Vec<String>, PreferredError> {
    if is_aligned(ad, available) {
        best_effort(ad, available, must_include, size, topo)
    } else {
        greedy(ad, available, must_include, size, policy)
    }
}

/// NVIDIA's condition for the topology-aware path: no MIG device in the resource
/// (`AlignedAllocationSupported`) and no replica among the available IDs (`AnyHasAnnotations`).
pub fn is_aligned(ad: &Resource, available: &[String]) -> bool {
    ad.devices.iter().all(|d| d.backing.mig.is_none())
        && !available.iter().any(|id| id.contains("::"))
}

/// go-gpuallocator's best-effort policy over full GPUs.
fn best_effort(
    ad: &Resource,
    available: &[String],
    required: &[String],
    size: usize,
    topo: Option<&Topology>,
) -> Result<Vec<String>, PreferredError> {
    let uuid_of = |id: &String| {
        ad.devices
            .iter()
            .find(|d| &d.id == id)
            .map(|d| d.backing.gpu_uuid.clone())
            .ok_or_else(|| PreferredError::UnknownDevice {
                resource: ad.name.clone(),
                id: id.clone(),
            })
    };
    let uuids = available
        .iter()
        .map(uuid_of)
        .collect::<Result<Vec<_>, _>>()?;
    required.iter().try_for_each(|id| uuid_of(id).map(drop))?;
    if size == 0 || available.len() < size || required.len() > size {
        return Ok(Vec::new());
    }
    let n = available.len();
    let mut scores = vec![vec![0u32; n]; n];
    for i in 0..n {
        for j in 0..n {
            if i != j {
                scores[i][j] = topo.map_or(0, |t| t.score(&uuids[i], &uuids[j]));
            }
        }
    }
    let req: Vec<usize> = required
        .iter()
        .filter_map(|r| available.iter().position(|a| a == r))
        .collect();
    if req.len() != required.len() {
        return Ok(Vec::new()); // a required GPU is not available: no set can hold it
    }
    let search = besteffort::Search {
        scores: &scores,
        required: &req,
        size,
        budget: besteffort::MAX_VISITS,
    };
    let outcome = search.run();
    if !outcome.exact {
        tracing::debug!(resource = %ad.name, available = n, size, visits = outcome.visits, "best-effort search cut at its budget; greedy preference");
    }
    Ok(outcome
        .set
        .map(|set| set.into_iter().map(|i| available[i].clone()).collect())
        .unwrap_or_default())
}

/// All `k`-subsets of `0..n` in lexicographic order (`iterateGPUSets`).
fn combinations(n: usize, k: usize) -> Vec<Vec<usize>> {
    let mut out = Vec::new();
    if k > n {
        return out;
    }
    let mut idx: Vec<usize> = (0..k).collect();
    loop {
        out.push(idx.clone());
        let Some(i) = (0..k).rev().find(|&i| idx[i] != i + n - k) else {
            return out;
        };
        idx[i] += 1;
        for j in i + 1..k {
            idx[j] = idx[j - 1] + 1;
        }
    }
}

/// Per physical device (GPU, or MIG device) bookkeeping of `greedyAlloc`.
struct Bucket {
    order: usize,
    total: usize,
    available: usize,
    picked: usize,
    candidates: Vec<String>,
}

/// NVIDIA's `greedyAlloc` over replicas and MIG devices.
fn greedy(
    ad: &Resource,
    available: &[String],
    required: &[String],
    size: usize,
    policy: AllocationPolicy,
) -> Result<Vec<String>, PreferredError> {
    // Physical device of each advertised ID (a replica's GPU or MIG device), in ad order.
    let mut keys: BTreeMap<&str, &str> = BTreeMap::new();
    let mut buckets: BTreeMap<&str, Bucket> = BTreeMap::new();
    for d in &ad.devices {
        let key = d
            .backing
            .mig
            .as_ref()
            .map_or(d.backing.gpu_uuid.as_str(), |m| m.uuid.as_str());
        keys.insert(&d.id, key);
        let order = buckets.len();
        let b = buckets.entry(key).or_insert(Bucket {
            order,
            total: 0,
            available: 0,
            picked: 0,
            candidates: Vec::new(),
        });
        b.total += 1;
    }
    let req: HashSet<&str> = required.iter().map(String::as_str).collect();
    let mut seen = HashSet::new();
    let mut count = 0;
    for id in available {
        let Some(key) = keys.get(id.as_str()) else {
            continue;
        };
        if req.contains(id.as_str()) || !seen.insert(id.as_str()) {
            continue;
        }
        if let Some(b) = buckets.get_mut(key) {
            b.available += 1;
            b.candidates.push(id.clone());
            count += 1;
        }
    }
    let needed = size.saturating_sub(required.len());
    if count < needed {
        return Err(PreferredError::NotEnough {
            resource: ad.name.clone(),
            needed,
            required: required.len(),
            available: count,
        });
    }
    for id in required {
        if let Some(b) = keys.get(id.as_str()).and_then(|k| buckets.get_mut(k)) {
            b.picked += 1;
        }
    }
    let mut out = required.to_vec();
    for _ in 0..needed {
        let best = buckets
            .values_mut()
            .filter(|b| !b.candidates.is_empty())
            .min_by_key(|b| {
                let allocated = b.total.saturating_sub(b.available);
                let load = match policy {
                    AllocationPolicy::Distributed => allocated,
                    AllocationPolicy::Packed => usize::MAX - allocated,
                };
                (load, b.picked, b.order)
            });
        // `count >= needed` guarantees a candidate is left.
        let Some(b) = best else { break };
        out.push(b.candidates.remove(0));
        b.available -= 1;
        b.picked += 1;
    }
    Ok(out)
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod bound_tests;

#[cfg(test)]
mod mock_tests;
