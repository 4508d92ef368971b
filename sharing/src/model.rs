//! Which devices a node has under a MIG strategy, and how replication multiplies them: NVIDIA's
//! resource model (`internal/rm/rm.go:AddDefaultResourcesToConfig`,
//! `internal/rm/device_map.go:buildDeviceMapFromConfigResources`/`updateDeviceMapWithReplicas`,
//! k8s-device-plugin v0.20.0; `shared/reference/kdp-facts.md` §2–§3).

use gpuhook_node::{Gpu, Inventory, MigDevice};

use crate::advertise::{AdvertiseError, Backing, DeviceIdStrategy, MigBacking};
use crate::config::MigStrategy;

/// `nvidia.com/gpu`.
pub const GPU_RESOURCE: &str = "nvidia.com/gpu";

/// One physical device (a GPU or a MIG device) under the resource name the MIG strategy gives it.
#[derive(Debug, Clone)]
pub struct BaseDevice {
    pub resource: String,
    /// The device's own UUID (`GPU-…` or `MIG-…`).
    pub uuid: String,
    pub backing: Backing,
    pub compute_capability: Option<(u32, u32)>,
}

/// `nvidia.com/mig-<profile>` with every `+` made `.` (`mig-1g.10gb+me` → `mig-1g.10gb.me`).
pub fn mig_resource_name(profile: &str) -> String {
    format!("nvidia.com/mig-{}", profile.replace('+', "."))
}

/// Whether NVIDIA makes a resource pattern for `profile`: only profiles whose compute slices equal
/// their GPU-instance slices (`1g.10gb`, not `1c.2g.10gb`).
pub fn profile_has_pattern(profile: &str) -> bool {
    !profile.split(['.', '+']).any(|part| {
        part.strip_suffix('c')
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    })
}

fn gpu_device(g: &Gpu, ids: DeviceIdStrategy) -> BaseDevice {
    BaseDevice {
        resource: GPU_RESOURCE.to_string(),
        uuid: g.uuid.clone(),
        backing: Backing {
            gpu_uuid: g.uuid.clone(),
            gpu_index: g.index,
            mig: None,
            device_name: match ids {
                DeviceIdStrategy::Uuid => g.uuid.clone(),
                DeviceIdStrategy::Index => g.index.to_string(),
            },
        },
        compute_capability: g.compute_capability,
    }
}

fn mig_device(g: &Gpu, m: &MigDevice, resource: String, ids: DeviceIdStrategy) -> BaseDevice {
    BaseDevice {
        resource,
        uuid: m.uuid.clone(),
        backing: Backing {
            gpu_uuid: g.uuid.clone(),
            gpu_index: g.index,
            mig: Some(MigBacking {
                uuid: m.uuid.clone(),
                gi: m.gi_id,
                ci: m.ci_id,
                profile: m.profile.clone().unwrap_or_default(),
            }),
            device_name: match ids {
                DeviceIdStrategy::Uuid => m.uuid.clone(),
                DeviceIdStrategy::Index => format!("{}:{}", g.index, m.index),
            },
        },
        compute_capability: g.compute_capability,
    }
}

/// The node's devices under `strategy`, in GPU index then MIG index order.
pub fn base_devices(
    inv: &Inventory,
    strategy: MigStrategy,
    ids: DeviceIdStrategy,
) -> Result<Vec<BaseDevice>, AdvertiseError> {
    let mut gpus: Vec<&Gpu> = inv.gpus.iter().collect();
    gpus.sort_by_key(|g| g.index);
    match strategy {
        MigStrategy::None => Ok(gpus.iter().map(|g| gpu_device(g, ids)).collect()),
        MigStrategy::Single => single(&gpus, ids),
        MigStrategy::Mixed => mixed(&gpus, ids),
    }
}

/// `single`: all GPUs alike; MIG GPUs each with MIG devices, all of one profile, as `nvidia.com/gpu`.
fn single(gpus: &[&Gpu], ids: DeviceIdStrategy) -> Result<Vec<BaseDevice>, AdvertiseError> {
    let mig = gpus.iter().filter(|g| g.mig_enabled).count();
    if mig == 0 {
        return Ok(gpus.iter().map(|g| gpu_device(g, ids)).collect());
    }
    if mig != gpus.len() {
        return Err(AdvertiseError::MigSingle(
            "all devices on the node must be configured with the same migEnabled value".into(),
        ));
    }
    let mut out = Vec::new();
    let mut profile: Option<&Option<String>> = None;
    for g in gpus {
        if g.mig_devices.is_empty() {
            return Err(AdvertiseError::MigSingle(format!(
                "device {} has no MIG devices configured",
                g.index
            )));
        }
        for m in &g.mig_devices {
            if profile.is_some_and(|p| *p != m.profile) {
                return Err(AdvertiseError::MigSingle(
                    "more than one MIG device type present on node".into(),
                ));
            }
            profile = Some(&m.profile);
            out.push(mig_device(g, m, GPU_RESOURCE.to_string(), ids));
        }
    }
    Ok(out)
}

/// `mixed`: GPUs without MIG as `nvidia.com/gpu`, each MIG device as `nvidia.com/mig-<profile>`.
fn mixed(gpus: &[&Gpu], ids: DeviceIdStrategy) -> Result<Vec<BaseDevice>, AdvertiseError> {
    let mut out = Vec::new();
    for g in gpus {
        if !g.mig_enabled {
            out.push(gpu_device(g, ids));
            continue;
        }
        if g.mig_devices.is_empty() {
            tracing::warn!(
                gpu = g.index,
                "MIG is enabled but the GPU has no MIG devices; nothing to advertise for it"
            );
        }
        for m in &g.mig_devices {
            let profile = m.profile.as_deref().unwrap_or("");
            if profile.is_empty() || !profile_has_pattern(profile) {
                return Err(AdvertiseError::MigProfile {
                    profile: profile.to_string(),
                    uuid: m.uuid.clone(),
                });
            }
            out.push(mig_device(g, m, mig_resource_name(profile), ids));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_profiles_with_as_many_compute_as_gpu_slices_have_a_pattern() {
        assert!(profile_has_pattern("1g.10gb"));
        assert!(profile_has_pattern("1g.10gb+me"));
        assert!(profile_has_pattern("7g.80gb"));
        assert!(!profile_has_pattern("1c.2g.10gb"));
        assert!(!profile_has_pattern("3c.4g.40gb"));
        assert_eq!(mig_resource_name("1g.10gb+me"), "nvidia.com/mig-1g.10gb.me");
    }
}
