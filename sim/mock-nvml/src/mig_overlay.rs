//! MIG layouts changed through NVML's write calls ([`crate::api_mig_write`]), laid over the
//! profile's.
//!
//! The device table stays immutable: a write persists the GPU's layout
//! (`gpuhook_sim::mig_state`), and the table is rebuilt from the profile with every persisted
//! layout laid over it ([`overlay`]), then swapped in (`state::reload`). A handle from the table
//! it replaced still names the same GPU, GPU instance, compute instance or MIG device
//! ([`Table::translate`]); one whose instance was destroyed becomes `INVALID_ARGUMENT`, as on a
//! real node. Other processes pick the new layout up at their next `nvmlInit`.

use std::os::raw::{c_uint, c_void};
use std::path::{Path, PathBuf};

use gpuhook_sim::mig_catalog::MigProduct;
use gpuhook_sim::mig_state::{self, SimMigGpu};
use gpuhook_sim::profile::{GpuProfile, NodeProfile};

use crate::instances::{ComputeInstance, GiProfile, GpuInstance};
use crate::table::{handle_of, Gpu, Mig, Table};

const MIB: u64 = 1024 * 1024;

/// What the table needs for MIG writes.
#[derive(Debug)]
pub struct TableMig {
    /// The driver root (the library directory minus the profile's `lib_dir`).
    pub root: PathBuf,
    pub caps_major: c_uint,
    /// The table this one replaced.
    pub previous: Option<&'static Table>,
    /// `mig_state::generation` when this table was built.
    pub generation: u64,
}

impl TableMig {
    pub fn new(profile: &NodeProfile, dir: &Path) -> TableMig {
        let depth = Path::new(&profile.lib_dir)
            .components()
            .count()
            .saturating_sub(1);
        let root = dir.ancestors().nth(depth).unwrap_or(dir).to_path_buf();
        TableMig {
            root,
            caps_major: profile.majors.nvidia_caps,
            previous: None,
            generation: mig_state::generation(dir),
        }
    }
}

/// The GPU instance profiles of a catalogued product; memory from the profile's MIG devices of
/// that name when it lists any (so static layouts agree), else the catalogue's.
pub fn catalog_profiles(gpu: &GpuProfile, product: &MigProduct) -> Vec<GiProfile> {
    product
        .profiles
        .iter()
        .map(|p| {
            let decoders = match p.slices {
                1 if p.media || p.size > 1 => 1,
                1 => 0,
                2 => 1,
                3 | 4 => 2,
                _ => 5,
            };
            let media = c_uint::from(p.media);
            let memory_mb = gpu
                .mig_devices
                .iter()
                .find(|m| m.profile == p.name)
                .map_or(p.memory_mib, |m| m.memory_mib);
            GiProfile {
                index: p.index,
                id: p.id,
                name: p.name.to_string(),
                slices: p.slices,
                instance_count: p.instance_count,
                memory_mb,
                engines: [p.slices, decoders, 0, media, media],
            }
        })
        .collect()
}

/// Lays every persisted MIG layout over the table's GPUs; a pending mode change whose reset
/// switch is gone takes effect here (the GPU was reset: no instances).
pub fn overlay(table: &mut Table) -> Result<(), String> {
    let dir = table.dir.clone();
    for gpu in &mut table.gpus {
        let Some(mut st) = mig_state::load(&dir, &gpu.uuid)? else {
            continue;
        };
        if let Some(p) = st.pending {
            if !mig_state::needs_reset_file(&dir, &gpu.uuid).exists() {
                st = SimMigGpu {
                    mig_enabled: p,
                    pending: None,
                    instances: Vec::new(),
                    serial: st.serial,
                };
                mig_state::save(&dir, &gpu.uuid, &st)
                    .map_err(|e| format!("{}: {e}", dir.display()))?;
            }
        }
        apply_state(gpu, &st);
    }
    table.mig.generation = mig_state::generation(&dir);
    Ok(())
}

fn apply_state(gpu: &mut Gpu, st: &SimMigGpu) {
    gpu.mig_enabled = st.mig_enabled;
    gpu.mig_pending = st.pending;
    gpu.gis.clear();
    gpu.migs.clear();
    if !st.mig_enabled {
        return;
    }
    for g in &st.instances {
        let Some(profile) = gpu.profiles.iter().find(|p| p.id == g.profile_id).cloned() else {
            continue;
        };
        for c in &g.cis {
            let name = if c.slices == profile.slices {
                profile.name.clone()
            } else {
                format!("{}c.{}", c.slices, profile.name)
            };
            gpu.migs.push(Mig {
                gi: g.id,
                ci: c.id,
                uuid: c.uuid.clone(),
                name: format!("{} MIG {name}", gpu.name),
                memory_bytes: profile.memory_mb * MIB,
            });
        }
        gpu.gis.push(GpuInstance {
            id: g.id,
            profile,
            start: g.start,
            cis: g
                .cis
                .iter()
                .map(|c| ComputeInstance {
                    id: c.id,
                    profile: c.profile,
                    slices: c.slices,
                })
                .collect(),
        });
    }
    gpu.gis.sort_by_key(|g| g.id);
    gpu.migs.sort_by_key(|m| (m.gi, m.ci));
}

/// A GPU's layout as the persisted form (what a write starts from).
pub fn state_of(gpu: &Gpu, serial: u64) -> SimMigGpu {
    SimMigGpu {
        mig_enabled: gpu.mig_enabled,
        pending: gpu.mig_pending,
        instances: gpu
            .gis
            .iter()
            .map(|g| mig_state::SimGi {
                id: g.id,
                profile_id: g.profile.id,
                start: g.start,
                size: placement_size(gpu, &g.profile),
                cis: g
                    .cis
                    .iter()
                    .map(|c| mig_state::SimCi {
                        id: c.id,
                        profile: c.profile,
                        slices: c.slices,
                        uuid: gpu
                            .migs
                            .iter()
                            .find(|m| m.gi == g.id && m.ci == c.id)
                            .map(|m| m.uuid.clone())
                            .unwrap_or_default(),
                    })
                    .collect(),
            })
            .collect(),
        serial,
    }
}

/// Memory slices of a profile's placements.
pub fn placement_size(gpu: &Gpu, p: &GiProfile) -> c_uint {
    gpuhook_sim::mig_catalog::product_for(&gpu.name)
        .and_then(|prod| prod.profiles.iter().find(|x| x.id == p.id))
        .map_or(if p.slices == 7 { 8 } else { p.slices }, |x| x.size)
}

impl Table {
    /// The handle in this table of what `handle` named in a table this one replaced.
    pub fn translate(&self, handle: *mut c_void) -> Option<*mut c_void> {
        let mut old = self.mig.previous;
        while let Some(t) = old {
            for (i, g) in t.gpus.iter().enumerate() {
                let now = self.gpus.get(i)?;
                if handle_of(g).cast() == handle {
                    return Some(handle_of(now).cast());
                }
                if let Some(m) = g.migs.iter().find(|m| handle_of(*m).cast() == handle) {
                    return now
                        .migs
                        .iter()
                        .find(|n| n.gi == m.gi && n.ci == m.ci)
                        .map(|n| handle_of(n).cast());
                }
                for gi in &g.gis {
                    let new_gi = now.gis.iter().find(|n| n.id == gi.id);
                    if handle_of(gi).cast() == handle {
                        return new_gi.map(|n| handle_of(n).cast());
                    }
                    if let Some(ci) = gi.cis.iter().find(|c| handle_of(*c).cast() == handle) {
                        return new_gi
                            .and_then(|n| n.cis.iter().find(|c| c.id == ci.id))
                            .map(|c| handle_of(c).cast());
                    }
                }
            }
            old = t.mig.previous;
        }
        None
    }

    /// The GPU instance behind a handle (after [`Table::translate`]).
    pub fn find_gi(&self, handle: *mut c_void) -> Option<(&Gpu, &GpuInstance)> {
        let find = |h: *mut c_void| {
            self.gpus.iter().find_map(|g| {
                g.gis
                    .iter()
                    .find(|gi| handle_of(*gi).cast() == h)
                    .map(|gi| (g, gi))
            })
        };
        find(handle).or_else(|| find(self.translate(handle)?))
    }

    /// The compute instance behind a handle (after [`Table::translate`]).
    pub fn find_ci(&self, handle: *mut c_void) -> Option<(&Gpu, &GpuInstance, &ComputeInstance)> {
        let find = |h: *mut c_void| {
            self.gpus.iter().find_map(|g| {
                g.gis.iter().find_map(|gi| {
                    gi.cis
                        .iter()
                        .find(|c| handle_of(*c).cast() == h)
                        .map(|c| (g, gi, c))
                })
            })
        };
        find(handle).or_else(|| find(self.translate(handle)?))
    }
}
