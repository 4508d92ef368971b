//! Which GPUs a config selects and what it wants of each, as mig-parted's
//! `WalkSelectedMigConfigForEachGPU` decides it: entries in order; a GPU matching an entry's
//! `device-filter` and `devices` gets that entry, a later entry winning; a GPU no entry matches
//! is left alone.

use std::collections::BTreeMap;

use crate::device_id::filter_matches;
use crate::error::MigError;
use crate::profile::MigProfile;
use crate::spec::{Devices, MigConfigSpec};
use crate::state::{GpuState, MigMode};

/// What one GPU should look like.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desired {
    pub index: u32,
    pub mig_enabled: bool,
    /// Canonical profile name -> count (zero counts dropped, equal spellings merged).
    pub devices: BTreeMap<MigProfile, u32>,
    /// Which entry of the config chose it.
    pub entry: usize,
}

impl Desired {
    /// The wanted devices as `mig-devices` spells them (canonical names).
    pub fn layout(&self) -> BTreeMap<String, u32> {
        self.devices
            .iter()
            .map(|(p, n)| (p.to_string(), *n))
            .collect()
    }
}

/// Whether an entry covers a GPU.
pub fn entry_matches(entry: &MigConfigSpec, gpu: &GpuState) -> bool {
    let by_index = match &entry.devices {
        Devices::All => true,
        Devices::List(list) => list.iter().any(|&i| i == i64::from(gpu.index)),
    };
    by_index && filter_matches(&entry.device_filter, &gpu.device_id)
}

/// The desired state of every GPU the config `entries` covers, in GPU order.
pub fn select(entries: &[MigConfigSpec], gpus: &[GpuState]) -> Result<Vec<Desired>, MigError> {
    let mut out = Vec::new();
    for gpu in gpus {
        let mut chosen = None;
        for (i, e) in entries.iter().enumerate() {
            if entry_matches(e, gpu) {
                chosen = Some((i, e));
            }
        }
        let Some((i, e)) = chosen else { continue };
        if gpu.mig == MigMode::NotCapable {
            if e.devices == Devices::All || !e.mig_enabled {
                continue;
            }
            return Err(MigError::NotCapable {
                index: gpu.index,
                uuid: gpu.uuid.clone(),
                model: gpu.model.clone(),
            });
        }
        let mut devices = BTreeMap::new();
        for (name, &count) in &e.mig_devices {
            if count == 0 {
                continue;
            }
            // Names were checked when the file was parsed.
            if let Ok(p) = MigProfile::parse(name) {
                *devices.entry(p).or_insert(0) += count;
            }
        }
        out.push(Desired {
            index: gpu.index,
            mig_enabled: e.mig_enabled,
            devices,
            entry: i,
        });
    }
    Ok(out)
}
