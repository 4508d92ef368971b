//! Placing GPU instances: every wanted instance gets one of its profile's possible placements
//! (`nvmlDeviceGetGpuInstancePossiblePlacements_v2`) without overlapping another, if any
//! assignment exists.
//!
//! Instances are placed largest first (mig-parted's order: G descending, then profile id), each
//! at the highest free start its profile allows. That is where NVML itself puts a `3g` on an
//! empty A100 (slice 4, GPU instance 2, as the MIG user guide's `-cgi 9,3g.20gb` example shows),
//! and it leaves the low slices to what follows; a search backs up when a later instance finds no
//! room, so any layout NVML can hold is found (mig-parted instead tries permutations of creation
//! order with NVML choosing the places).

use crate::state::Placement;

/// One instance to place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub profile_id: u32,
    pub slices: u32,
    /// Allowed placements of its profile.
    pub placements: Vec<Placement>,
}

/// Placements for `items` (same order) that avoid each other and `occupied`, or `None`.
pub fn pack(items: &[Item], occupied: &[Placement]) -> Option<Vec<Placement>> {
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(items[i].slices), items[i].profile_id));
    let mut used: Vec<Placement> = occupied.to_vec();
    let mut chosen: Vec<Option<Placement>> = vec![None; items.len()];
    if place(items, &order, 0, &mut used, &mut chosen) {
        chosen.into_iter().collect()
    } else {
        None
    }
}

fn place(
    items: &[Item],
    order: &[usize],
    k: usize,
    used: &mut Vec<Placement>,
    chosen: &mut [Option<Placement>],
) -> bool {
    let Some(&i) = order.get(k) else {
        return true;
    };
    // Identical instances take places in descending order only (no symmetric retries).
    let bound = k
        .checked_sub(1)
        .map(|j| order[j])
        .filter(|&j| items[j].profile_id == items[i].profile_id)
        .and_then(|j| chosen[j])
        .map(|p| p.start);
    let mut candidates = items[i].placements.clone();
    candidates.sort_by_key(|p| std::cmp::Reverse(p.start));
    for p in candidates {
        if bound.is_some_and(|b| p.start >= b) || used.iter().any(|u| u.overlaps(&p)) {
            continue;
        }
        used.push(p);
        chosen[i] = Some(p);
        if place(items, order, k + 1, used, chosen) {
            return true;
        }
        used.pop();
        chosen[i] = None;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(profile_id: u32, slices: u32, starts: &[u32], size: u32) -> Item {
        Item {
            profile_id,
            slices,
            placements: starts
                .iter()
                .map(|&start| Placement { start, size })
                .collect(),
        }
    }

    #[test]
    fn a100_mixed_layout_puts_3g_high_and_2g_below() {
        // A100 placements (MIG user guide, `nvidia-smi mig -lgipp`): 3g {0,4}:4, 2g {0,2,4}:2.
        let items = [
            item(14, 2, &[0, 2, 4], 2),
            item(9, 3, &[0, 4], 4),
            item(14, 2, &[0, 2, 4], 2),
        ];
        let got = pack(&items, &[]).unwrap();
        assert_eq!(got[1], Placement { start: 4, size: 4 });
        let mut twos = [got[0].start, got[2].start];
        twos.sort_unstable();
        assert_eq!(twos, [0, 2]);
    }

    #[test]
    fn backtracks_and_refuses_what_cannot_fit() {
        // 4g {0}:4 + 3g {0,4}:4: the 3g must go to 4.
        let items = [item(5, 4, &[0], 4), item(9, 3, &[0, 4], 4)];
        assert_eq!(pack(&items, &[]).unwrap()[1].start, 4);
        let three = [
            item(9, 3, &[0, 4], 4),
            item(9, 3, &[0, 4], 4),
            item(9, 3, &[0, 4], 4),
        ];
        assert!(pack(&three, &[]).is_none());
        // A kept instance at 4 leaves only 0 for a 3g.
        let kept = [Placement { start: 4, size: 4 }];
        assert_eq!(pack(&three[..1], &kept).unwrap()[0].start, 0);
    }
}
