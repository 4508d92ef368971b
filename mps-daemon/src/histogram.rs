//! The command latency histogram: kept by the status board ([`crate::status`]), written out by
//! [`crate::metrics`] (a module of its own so that neither of those imports the other for it).

/// Upper bounds (seconds) of the command latency buckets.
pub const BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// A latency histogram with [`BUCKETS`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Histogram {
    /// Observations per bucket (not cumulative); the last slot is `+Inf` only.
    counts: [u64; BUCKETS.len() + 1],
    sum: f64,
}

impl Histogram {
    pub fn observe(&mut self, v: f64) {
        let i = BUCKETS
            .iter()
            .position(|b| v <= *b)
            .unwrap_or(BUCKETS.len());
        self.counts[i] += 1;
        self.sum += v;
    }

    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Observations per bucket (not cumulative), `+Inf` last.
    pub fn counts(&self) -> [u64; BUCKETS.len() + 1] {
        self.counts
    }

    /// Sum of the observed values.
    pub fn sum(&self) -> f64 {
        self.sum
    }
}
