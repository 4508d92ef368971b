//! What a partitionable device (KEP-4815) consumes from its GPU's counter set, and the MIG
//! placement it stands for (see `partition.rs`).

use std::collections::BTreeMap;

use gpuhook_mig::Placement;
use serde_json::{json, Value};

/// The counter of compute slices.
pub const COMPUTE_SLICES: &str = "compute-slices";

/// A MIG profile's capacities besides its slices, from NVML's GPU-instance profile info: what
/// NVIDIA's DRA driver publishes as a MIG device's capacities (`mig.go`, `CommonCapacitiesMig`)
/// and, in dash case, as counters of the GPU's counter set (`partitions.go`: the GPU's counters
/// are the largest of every profile, each placement consumes its profile's). The engine counters
/// make the media profiles (`+me`: the GPU's only JPEG/OFA engines) safe to publish.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Engines {
    pub multiprocessors: u32,
    pub copy_engines: u32,
    pub decoders: u32,
    pub encoders: u32,
    pub jpeg_engines: u32,
    pub ofa_engines: u32,
    pub memory_bytes: u64,
}

impl Engines {
    /// A profile's capacities from NVML's counts and its memory.
    pub fn of(e: &gpuhook_node::nvml::MigEngines, memory_mib: u64) -> Self {
        Engines {
            multiprocessors: e.multiprocessors,
            copy_engines: e.copy_engines,
            decoders: e.decoders,
            encoders: e.encoders,
            jpeg_engines: e.jpeg_engines,
            ofa_engines: e.ofa_engines,
            memory_bytes: memory_mib << 20,
        }
    }

    /// The larger of each capacity.
    pub fn max(self, o: Engines) -> Self {
        Engines {
            multiprocessors: self.multiprocessors.max(o.multiprocessors),
            copy_engines: self.copy_engines.max(o.copy_engines),
            decoders: self.decoders.max(o.decoders),
            encoders: self.encoders.max(o.encoders),
            jpeg_engines: self.jpeg_engines.max(o.jpeg_engines),
            ofa_engines: self.ofa_engines.max(o.ofa_engines),
            memory_bytes: self.memory_bytes.max(o.memory_bytes),
        }
    }

    /// What is left of `self` once `o` is taken (never below zero).
    pub fn minus(self, o: Engines) -> Self {
        Engines {
            multiprocessors: self.multiprocessors.saturating_sub(o.multiprocessors),
            copy_engines: self.copy_engines.saturating_sub(o.copy_engines),
            decoders: self.decoders.saturating_sub(o.decoders),
            encoders: self.encoders.saturating_sub(o.encoders),
            jpeg_engines: self.jpeg_engines.saturating_sub(o.jpeg_engines),
            ofa_engines: self.ofa_engines.saturating_sub(o.ofa_engines),
            memory_bytes: self.memory_bytes.saturating_sub(o.memory_bytes),
        }
    }

    /// (capacity name, counter name, value), NVIDIA's names.
    pub fn entries(&self) -> [(&'static str, &'static str, u64); 7] {
        [
            (
                "multiprocessors",
                "multiprocessors",
                self.multiprocessors.into(),
            ),
            ("copyEngines", "copy-engines", self.copy_engines.into()),
            ("decoders", "decoders", self.decoders.into()),
            ("encoders", "encoders", self.encoders.into()),
            ("jpegEngines", "jpeg-engines", self.jpeg_engines.into()),
            ("ofaEngines", "ofa-engines", self.ofa_engines.into()),
            ("memory", "memory", self.memory_bytes),
        ]
    }
}

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
    /// Engine and memory counters (`None`: not known, only slices are counted).
    pub engines: Option<Engines>,
    /// `None`: the full GPU.
    pub mig: Option<MigSlot>,
    /// The full GPU's slot: what MIG devices this plugin did not make already hold (their
    /// counters are not available: its counter set holds the rest).
    pub taken: Option<Box<Taken>>,
    /// The GPU switches MIG mode without a reset (NVIDIA's `supportsMIGModeToggle`: Hopper and
    /// newer): the plugin may switch it (on for a placement, off for the full GPU).
    pub toggles: bool,
    /// The full GPU's slot: whether the full GPU is published (`false`: an Ampere GPU in MIG
    /// mode, which cannot leave it without a reset; only its counter set is published).
    pub offered: bool,
}

/// What existing MIG devices not made by this plugin hold of a GPU.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Taken {
    pub memory_slices: std::collections::BTreeSet<u32>,
    pub compute_slices: u32,
    pub engines: Engines,
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
        for (_, name, v) in self.engines.iter().flat_map(Engines::entries) {
            c.insert(name.to_string(), json!({ "value": v.to_string() }));
        }
        json!(c)
    }

    /// The GPU's counter set (`counters()` less what is [`Taken`]: a taken memory slice is 0).
    pub fn set_counters(&self) -> Value {
        let mut c = self.counters();
        let Some(t) = &self.taken else {
            return c;
        };
        for i in &t.memory_slices {
            c[format!("memory-slice-{i}")] = json!({ "value": "0" });
        }
        let left = self.compute_slices.saturating_sub(t.compute_slices);
        c[COMPUTE_SLICES] = json!({ "value": left.to_string() });
        if let Some(e) = self.engines {
            for (_, name, v) in e.minus(t.engines).entries() {
                c[name] = json!({ "value": v.to_string() });
            }
        }
        c
    }

    /// Adds a MIG placement's capacities (NVIDIA's MIG device capacities) to `capacity`.
    pub fn add_capacity(&self, capacity: &mut Value) {
        let Some(e) = self.engines.filter(|_| self.mig.is_some()) else {
            return;
        };
        for (name, _, v) in e.entries() {
            capacity[name] = json!({ "value": v.to_string() });
        }
    }
}
