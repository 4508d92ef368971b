//! GPU instances, compute instances and MIG profiles of a GPU in MIG mode, as NVML models them.
//!
//! A MIG device of the profile is one (GPU instance, compute instance) pair; NVML also exposes the
//! instances themselves (`nvmlGpuInstance_t`, `nvmlComputeInstance_t`) and the catalogue of
//! profiles the model supports. Tools walk from a MIG device to its instances and match profile
//! ids (go-nvlib's `GetProfile`), so the ids must agree: a GPU instance's `profileId` is the
//! `id` of one entry of `nvmlDeviceGetGpuInstanceProfileInfo`, a compute instance's `profileId` the
//! `id` of one of `nvmlGpuInstanceGetComputeInstanceProfileInfo`.
//!
//! Profile indexes and ids are NVML's (`NVML_GPU_INSTANCE_PROFILE_1_SLICE` = 0 has id 19 on
//! A100/H100, `2_SLICE` 14, `3_SLICE` 9, `4_SLICE` 5, `7_SLICE` 0, `1_SLICE_REV2` (1g.20gb) 15;
//! compute instance profile ids equal their `NVML_COMPUTE_INSTANCE_PROFILE_*` index). Engine
//! counts follow `nvidia-smi mig -lgip` on A100-80GB.

use std::os::raw::c_uint;

use gpuhook_sim::profile::GpuProfile;
use gpuhook_sim::validate::{mig_profiles_for, mig_slices};

/// One GPU instance profile the model supports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GiProfile {
    /// `NVML_GPU_INSTANCE_PROFILE_*`, the `profile` argument of the profile-info calls.
    pub index: c_uint,
    /// The profile id (`nvidia-smi mig -lgip`'s ID column).
    pub id: c_uint,
    /// `1g.10gb`
    pub name: String,
    pub slices: c_uint,
    pub instance_count: c_uint,
    pub memory_mb: u64,
    /// Copy engines, decoders, encoders, JPEG decoders, optical flow accelerators.
    pub engines: [c_uint; 5],
}

/// A GPU instance.
#[derive(Debug)]
pub struct GpuInstance {
    pub id: c_uint,
    pub profile: GiProfile,
    pub start: c_uint,
    pub cis: Vec<ComputeInstance>,
}

/// A compute instance (here: always spanning its whole GPU instance, like the reference layouts).
#[derive(Debug)]
pub struct ComputeInstance {
    pub id: c_uint,
    /// `NVML_COMPUTE_INSTANCE_PROFILE_*` (= its profile id).
    pub profile: c_uint,
    pub slices: c_uint,
}

/// Streaming multiprocessors per MIG slice (A100: 98 SMs in 7 slices; H100/H20: 16).
pub fn sms_per_slice(gpu_name: &str) -> c_uint {
    if gpu_name.contains("A100") || gpu_name.contains("A30") {
        14
    } else {
        16
    }
}

/// `NVML_COMPUTE_INSTANCE_PROFILE_*` of a compute instance with `slices` slices.
pub fn ci_profile_for(slices: c_uint) -> Option<c_uint> {
    match slices {
        1 => Some(0),
        2 => Some(1),
        3 => Some(2),
        4 => Some(3),
        7 => Some(4),
        _ => None,
    }
}

fn gb_of(name: &str) -> u64 {
    name.split_once("g.")
        .and_then(|(_, rest)| rest.trim_end_matches("gb").parse().ok())
        .unwrap_or(0)
}

/// The GPU instance profiles of a GPU model (empty when it has no MIG we model). Memory is taken
/// from a MIG device of the profile with that layout, else 97.5 % of the nominal size (what
/// A100/H100 report: 9984 MiB for `1g.10gb`).
pub fn gi_profiles(gpu: &GpuProfile) -> Vec<GiProfile> {
    if let Some(product) = gpuhook_sim::mig_catalog::product_for(&gpu.name) {
        return crate::mig_overlay::catalog_profiles(gpu, product);
    }
    let Some(names) = mig_profiles_for(&gpu.name) else {
        return Vec::new();
    };
    let smallest_1g = names
        .iter()
        .filter(|n| n.starts_with("1g."))
        .map(|n| gb_of(n))
        .min()
        .unwrap_or(0);
    names
        .iter()
        .filter_map(|name| {
            let slices = mig_slices(name)?;
            let big_1g = slices == 1 && gb_of(name) > smallest_1g;
            let (index, id, count) = match slices {
                1 if big_1g => (9, 15, 4),
                1 => (0, 19, 7),
                2 => (1, 14, 3),
                3 => (2, 9, 2),
                4 => (3, 5, 1),
                7 => (4, 0, 1),
                _ => return None,
            };
            let decoders = match slices {
                1 if big_1g => 1,
                1 => 0,
                2 => 1,
                3 | 4 => 2,
                _ => 5,
            };
            let full = c_uint::from(slices == 7);
            let memory_mb = gpu
                .mig_devices
                .iter()
                .find(|m| m.profile == *name)
                .map_or(gb_of(name) * 1024 * 975 / 1000, |m| m.memory_mib);
            Some(GiProfile {
                index,
                id,
                name: name.to_string(),
                slices,
                instance_count: count,
                memory_mb,
                engines: [slices, decoders, 0, full, full],
            })
        })
        .collect()
}

/// Start slices NVML allows for a GPU instance of `slices` slices on a 7-slice GPU (3g prefers 4,
/// so 3g + 2g + 2g fits as on a real A100).
fn valid_starts(slices: c_uint) -> &'static [c_uint] {
    match slices {
        1 => &[0, 1, 2, 3, 4, 5, 6],
        2 => &[0, 2, 4],
        3 => &[4, 0],
        _ => &[0],
    }
}

/// The GPU instances behind the profile's MIG devices, in GI id order, each with its compute
/// instances. Placements are first-fit, largest instance first, over NVML's allowed starts.
pub fn gpu_instances(gpu: &GpuProfile, profiles: &[GiProfile]) -> Vec<GpuInstance> {
    let mut gis: Vec<GpuInstance> = Vec::new();
    for m in &gpu.mig_devices {
        let Some(profile) = profiles.iter().find(|p| p.name == m.profile) else {
            continue;
        };
        let slices = profile.slices;
        let ci = ComputeInstance {
            id: m.ci_id,
            profile: ci_profile_for(slices).unwrap_or(0),
            slices,
        };
        match gis.iter_mut().find(|g| g.id == m.gi_id) {
            Some(gi) => gi.cis.push(ci),
            None => gis.push(GpuInstance {
                id: m.gi_id,
                profile: profile.clone(),
                start: 0,
                cis: vec![ci],
            }),
        }
    }
    let mut used = [false; 8];
    let mut by_size: Vec<usize> = (0..gis.len()).collect();
    by_size.sort_by_key(|&i| std::cmp::Reverse(gis[i].profile.slices));
    for i in by_size {
        let size = gis[i].profile.slices as usize;
        let fits = |s: usize| s + size <= 8 && used[s..s + size].iter().all(|u| !u);
        if let Some(&start) = valid_starts(gis[i].profile.slices)
            .iter()
            .find(|&&s| fits(s as usize))
        {
            used[start as usize..start as usize + size].fill(true);
            gis[i].start = start;
        }
    }
    gis.sort_by_key(|g| g.id);
    for gi in &mut gis {
        gi.cis.sort_by_key(|c| c.id);
    }
    gis
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuhook_sim::profile::NodeProfile;

    #[test]
    fn a100_profiles_carry_nvml_ids_and_device_memory() {
        let p = NodeProfile::builtin("a100-mig-mixed").unwrap();
        let profiles = gi_profiles(&p.gpus[0]);
        let ids: Vec<(String, c_uint, c_uint)> = profiles
            .iter()
            .map(|g| (g.name.clone(), g.index, g.id))
            .collect();
        assert!(ids.contains(&("3g.40gb".into(), 2, 9)), "{ids:?}");
        assert!(ids.contains(&("1g.10gb".into(), 0, 19)), "{ids:?}");
        assert!(ids.contains(&("7g.80gb".into(), 4, 0)), "{ids:?}");
        let three = profiles.iter().find(|g| g.name == "3g.40gb").unwrap();
        assert_eq!(three.memory_mb, p.gpus[0].mig_devices[0].memory_mib);
        let gis = gpu_instances(&p.gpus[0], &profiles);
        let layout: Vec<(c_uint, c_uint, c_uint)> = gis
            .iter()
            .map(|g| (g.id, g.profile.slices, g.start))
            .collect();
        // 3g.40gb (GI 2) at slice 4, the two 2g.20gb (GI 3, GI 5) at 0 and 2, as on an A100.
        assert_eq!(layout, [(2, 3, 4), (3, 2, 0), (5, 2, 2)]);
        assert!(gis
            .iter()
            .all(|g| g.cis.len() == 1 && g.cis[0].slices == g.profile.slices));
    }

    #[test]
    fn h100_has_the_1g_20gb_rev2_profile() {
        let p = NodeProfile::builtin("h100-mig").unwrap();
        let profiles = gi_profiles(&p.gpus[0]);
        let rev2 = profiles.iter().find(|g| g.name == "1g.20gb").unwrap();
        assert_eq!((rev2.index, rev2.id, rev2.instance_count), (9, 15, 4));
        let empty = NodeProfile::builtin("h100-mig-empty").unwrap();
        assert!(gpu_instances(&empty.gpus[0], &gi_profiles(&empty.gpus[0])).is_empty());
        assert!(gi_profiles(&NodeProfile::builtin("t4").unwrap().gpus[0]).is_empty());
    }
}
