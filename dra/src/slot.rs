//! What a partitionable device (KEP-4815) consumes from its GPU's counter set, and the MIG
//! placement it stands for (see `partition.rs`).

use std::collections::BTreeMap;

use gpuhook_mig::Placement;
use serde_json::{json, Value};

/// The counter of compute slices.
pub const COMPUTE_SLICES: &str = "compute-slices";

/// A MIG placement a device stands for (created at prepare).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigSlot {
    /// GPU-instance profile name (`1g.10gb`).
    pub profile: String,
    pub profile_id: u32,
    pub placement: Placement,
}

/// What a partitionable device consumes from its GPU's counter set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slot {
    pub gpu_index: u32,
    pub counter_set: String,
    pub memory_slices: std::ops::Range<u32>,
    pub compute_slices: u32,
    /// `None`: the full GPU.
    pub mig: Option<MigSlot>,
}

impl Slot {
    /// The counters consumed (`consumesCounters` entry's `counters`).
    pub fn counters(&self) -> Value {
        let mut c = BTreeMap::new();
        for i in self.memory_slices.clone() {
            c.insert(format!("memory-slice-{i}"), json!({ "value": "1" }));
        }
        c.insert(
            COMPUTE_SLICES.to_string(),
            json!({ "value": self.compute_slices.to_string() }),
        );
        json!(c)
    }
}
