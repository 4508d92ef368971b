//! go-gpuallocator's best-effort search over full GPUs, bounded (#22).
//!
//! NVIDIA enumerates every partition of the available GPUs (padded so the count divides) into
//! sets of `size` and keeps the first of the best-scored partitions: 3 of 16 GPUs is ~22 million
//! partitions, seconds of CPU on every pod admission. Here the same enumeration, in the same
//! order, is a branch-and-bound: a branch whose score plus an upper bound of what its remaining
//! GPUs can add cannot beat the best partition so far is cut. Cutting only branches that cannot
//! be *strictly* better keeps NVIDIA's answer (the first best partition, then its first best
//! usable set) wherever the search completes. The search stops after [`MAX_VISITS`] steps;
//! then a greedy choice answers (grow a set from the required GPUs, or from each GPU in turn,
//! by the GPU with the best links to the set), which is a preference only: the kubelet
//! intersects it with its NUMA-aligned choice and tops it up.

/// Most search steps (partial partitions visited) before the greedy fallback answers.
pub const MAX_VISITS: u64 = 100_000;

/// A padded device list: `None` is padding.
type Slot = Option<usize>;

/// What a search found and how much work it did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The chosen GPUs (indices into the score matrix), or none.
    pub set: Option<Vec<usize>>,
    /// Partial partitions visited.
    pub visits: u64,
    /// Whether the exhaustive (NVIDIA-equal) search completed; `false`: greedy answered.
    pub exact: bool,
}

/// One request's search: pairwise scores, required GPUs, set size, step budget.
pub struct Search<'a> {
    pub scores: &'a [Vec<u32>],
    pub required: &'a [usize],
    pub size: usize,
    pub budget: u64,
}

struct State {
    visits: u64,
    aborted: bool,
    best: Option<(u32, Vec<Vec<Slot>>)>,
}

impl Search<'_> {
    fn set_score(&self, set: &[Slot]) -> u32 {
        let mut total = 0;
        for (k, a) in set.iter().enumerate() {
            for b in &set[k + 1..] {
                if let (Some(a), Some(b)) = (a, b) {
                    total += self.scores[*a][*b];
                }
            }
        }
        total
    }

    fn usable(&self, set: &[Slot]) -> bool {
        self.required.iter().all(|r| set.contains(&Some(*r))) && !set.contains(&None)
    }

    /// At most what sets of `size` drawn from `rest` can score together: each GPU's best
    /// `size - 1` links within `rest`, summed, counts every pair of a set twice.
    fn bound(&self, rest: &[Slot]) -> u32 {
        let real: Vec<usize> = rest.iter().flatten().copied().collect();
        let mut total = 0u64;
        let mut row = Vec::with_capacity(real.len());
        for &a in &real {
            row.clear();
            row.extend(real.iter().filter(|&&b| b != a).map(|&b| self.scores[a][b]));
            row.sort_unstable_by(|x, y| y.cmp(x));
            total += row
                .iter()
                .take(self.size - 1)
                .map(|&s| u64::from(s))
                .sum::<u64>();
        }
        u32::try_from(total / 2).unwrap_or(u32::MAX)
    }

    /// NVIDIA's answer when the search completes within the budget, else the greedy one.
    pub fn run(&self) -> Outcome {
        let n = self.scores.len();
        if self.size == 1 {
            // Every partition is singletons; the first usable one wins (all score 0).
            let set = (0..n).find(|&d| self.usable(&[Some(d)])).map(|d| vec![d]);
            return Outcome {
                set,
                visits: 1,
                exact: true,
            };
        }
        let mut devices: Vec<Slot> = (0..n).map(Some).collect();
        devices.resize(n.next_multiple_of(self.size), None);
        let padding = devices.len() - n;
        let mut st = State {
            visits: 0,
            aborted: false,
            best: None,
        };
        self.partitions(&devices, padding, 0, &mut Vec::new(), &mut st);
        if st.aborted {
            return Outcome {
                set: self.greedy(),
                visits: st.visits,
                exact: false,
            };
        }
        let set = st.best.and_then(|(_, partition)| {
            let mut chosen: Option<(u32, &Vec<Slot>)> = None;
            for set in partition.iter().filter(|s| self.usable(s)) {
                let score = self.set_score(set);
                if chosen.is_none_or(|(b, _)| score > b) {
                    chosen = Some((score, set));
                }
            }
            chosen.map(|(_, set)| set.iter().flatten().copied().collect())
        });
        Outcome {
            set,
            visits: st.visits,
            exact: true,
        }
    }

    /// `iterateGPUPartitions` with cuts: sets start with the first remaining device, so each
    /// partition is seen once; a set holds no padding or all of it.
    fn partitions(
        &self,
        devices: &[Slot],
        padding: usize,
        score: u32,
        accum: &mut Vec<Vec<Slot>>,
        st: &mut State,
    ) {
        st.visits += 1;
        if st.visits > self.budget {
            st.aborted = true;
        }
        if st.aborted {
            return;
        }
        if let Some((best, _)) = &st.best {
            if score.saturating_add(self.bound(devices)) <= *best {
                return;
            }
        }
        if devices.len() == self.size {
            let total = score + self.set_score(devices);
            accum.push(devices.to_vec());
            let better = st.best.as_ref().is_none_or(|(b, _)| total > *b);
            if better && accum.iter().any(|s| self.usable(s)) {
                st.best = Some((total, accum.clone()));
            }
            accum.pop();
            return;
        }
        let rest = &devices[1..];
        for combo in super::combinations(rest.len(), self.size - 1) {
            let mut set = vec![devices[0]];
            set.extend(combo.iter().map(|&k| rest[k]));
            let p = set.iter().filter(|d| d.is_none()).count();
            if p != 0 && p != padding {
                continue;
            }
            let remaining: Vec<Slot> = devices
                .iter()
                .filter(|d| !set.contains(d))
                .copied()
                .collect();
            let s = score + self.set_score(&set);
            accum.push(set);
            self.partitions(&remaining, padding, s, accum, st);
            accum.pop();
            if st.aborted {
                return;
            }
        }
    }

    /// The greedy fallback: from the required GPUs (or from each GPU in turn when none is
    /// required), add the GPU with the highest summed score to the set until it has `size`;
    /// the best-scored result wins, the first on ties.
    fn greedy(&self) -> Option<Vec<usize>> {
        let n = self.scores.len();
        if self.size > n || self.required.len() > self.size {
            return None;
        }
        let seeds: Vec<Vec<usize>> = if self.required.is_empty() {
            (0..n).map(|d| vec![d]).collect()
        } else {
            vec![self.required.to_vec()]
        };
        let mut best: Option<(u32, Vec<usize>)> = None;
        for mut set in seeds {
            while set.len() < self.size {
                let gain = |d: usize| set.iter().map(|&s| self.scores[s][d]).sum::<u32>();
                let mut pick: Option<(u32, usize)> = None;
                for d in (0..n).filter(|d| !set.contains(d)) {
                    if pick.is_none_or(|(g, _)| gain(d) > g) {
                        pick = Some((gain(d), d));
                    }
                }
                let (_, d) = pick?;
                set.push(d);
            }
            let slots: Vec<Slot> = set.iter().copied().map(Some).collect();
            let score = self.set_score(&slots);
            if best.as_ref().is_none_or(|(b, _)| score > *b) {
                best = Some((score, set));
            }
        }
        best.map(|(_, set)| set)
    }
}
