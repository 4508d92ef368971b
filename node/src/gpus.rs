//! GPU and MIG device enumeration, from NVML or (without it) from `/proc`.
//!
//! NVML is the only source of MIG devices and of indexes as CUDA sees them; `/proc` still knows
//! every full GPU (UUID, bus id, minor), which is enough to inject whole GPUs when NVML is broken.
//! Capability minors of MIG devices always come from `/proc` (keyed by the parent's *minor*).

use crate::error::NodeError;
use crate::inventory::{Gpu, MigDevice};
use crate::nvml::{Device, Nvml};
use crate::procfs::{MigMinors, ProcFs};

const MIB: u64 = 1024 * 1024;

/// GPUs from NVML, MIG devices included. `warnings` gets MIG devices that had to be left out.
pub fn gpus_from_nvml(
    nvml: &Nvml,
    proc: &ProcFs,
    warnings: &mut Vec<String>,
) -> Result<Vec<Gpu>, NodeError> {
    let count = nvml.device_count()?;
    let mut gpus = Vec::with_capacity(count as usize);
    let mut mig_minors: Option<Option<MigMinors>> = None;
    for index in 0..count {
        let dev = nvml.device_by_index(index)?;
        let mut gpu = Gpu {
            index,
            minor: dev.minor_number()?,
            uuid: dev.uuid()?,
            pci_bus_id: dev.pci_bus_id().unwrap_or_default(),
            name: dev.name()?,
            memory_mib: dev.memory_total().map(|b| b / MIB).unwrap_or(0),
            architecture: optional(dev.architecture()).flatten().map(str::to_string),
            compute_capability: optional(dev.cuda_compute_capability()),
            brand: optional(dev.brand()).flatten().map(str::to_string),
            mig_enabled: dev.mig_enabled().unwrap_or(false),
            mig_devices: Vec::new(),
        };
        if gpu.mig_enabled {
            let minors = match &mig_minors {
                Some(m) => m,
                None => mig_minors.insert(proc.mig_minors()?),
            };
            gpu.mig_devices = mig_devices(&dev, &gpu, proc, minors.as_ref(), warnings)?;
        }
        gpus.push(gpu);
    }
    Ok(gpus)
}

fn optional<T>(r: Result<T, NodeError>) -> Option<T> {
    r.map_err(|e| tracing::debug!(error = %e, "optional NVML query failed"))
        .ok()
}

fn mig_devices(
    dev: &Device<'_>,
    gpu: &Gpu,
    proc: &ProcFs,
    minors: Option<&MigMinors>,
    warnings: &mut Vec<String>,
) -> Result<Vec<MigDevice>, NodeError> {
    let max = dev.max_mig_device_count()?;
    let mut out = Vec::new();
    for index in 0..max {
        let Some(mig) = dev.mig_device_by_index(index)? else {
            continue;
        };
        let gi_id = mig.gpu_instance_id()?;
        let ci_id = mig.compute_instance_id()?;
        let uuid = mig.uuid()?;
        let gi_cap = cap_minor(proc, minors, gpu.minor, gi_id, None)?;
        let ci_cap = cap_minor(proc, minors, gpu.minor, gi_id, Some(ci_id))?;
        let (Some(gi_cap_minor), Some(ci_cap_minor)) = (gi_cap, ci_cap) else {
            warnings.push(format!(
                "MIG device {uuid} (GPU {} gi {gi_id} ci {ci_id}) left out: no capability minor for it in \
                 /proc/driver/nvidia-caps/mig-minors or {}",
                gpu.index,
                ProcFs::mig_access_file(gpu.minor, gi_id, Some(ci_id))
            ));
            continue;
        };
        let name = mig.name().unwrap_or_default();
        out.push(MigDevice {
            index,
            parent_index: gpu.index,
            gi_id,
            ci_id,
            uuid,
            memory_mib: mig.memory_total().map(|b| b / MIB).unwrap_or(0),
            profile: mig_profile(&name),
            gi_cap_minor,
            ci_cap_minor,
        });
    }
    Ok(out)
}

/// Minor of a MIG capability: `mig-minors` first, then the `access` file's `DeviceFileMinor`.
fn cap_minor(
    proc: &ProcFs,
    minors: Option<&MigMinors>,
    gpu_minor: u32,
    gi: u32,
    ci: Option<u32>,
) -> Result<Option<u32>, NodeError> {
    let from_table = minors.and_then(|m| match ci {
        Some(ci) => m.ci(gpu_minor, gi, ci),
        None => m.gi(gpu_minor, gi),
    });
    if from_table.is_some() {
        return Ok(from_table);
    }
    let rel = match ci {
        Some(ci) => format!("gpu{gpu_minor}/mig/gi{gi}/ci{ci}/access"),
        None => format!("gpu{gpu_minor}/mig/gi{gi}/access"),
    };
    proc.capability_minor(&rel)
}

/// `NVIDIA A100-SXM4-80GB MIG 1g.10gb` -> `1g.10gb`.
pub fn mig_profile(name: &str) -> Option<String> {
    let (_, profile) = name.rsplit_once("MIG ")?;
    let profile = profile.trim();
    (!profile.is_empty()).then(|| profile.to_string())
}

/// Full GPUs from `/proc/driver/nvidia/gpus`, indexed in PCI bus order (NVML's default order).
pub fn gpus_from_procfs(proc: &ProcFs) -> Result<Vec<Gpu>, NodeError> {
    Ok(proc
        .gpus()?
        .into_iter()
        .enumerate()
        .map(|(i, g)| Gpu {
            index: u32::try_from(i).unwrap_or(u32::MAX),
            minor: g.minor,
            uuid: g.uuid,
            pci_bus_id: g.pci_bus_id,
            name: g.model,
            memory_mib: 0,
            architecture: None,
            compute_capability: None,
            brand: None,
            mig_enabled: false,
            mig_devices: Vec::new(),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mig_profile_from_name() {
        assert_eq!(
            mig_profile("NVIDIA A100-SXM4-80GB MIG 1g.10gb").as_deref(),
            Some("1g.10gb")
        );
        assert_eq!(
            mig_profile("NVIDIA H100 80GB HBM3 MIG 1g.10gb+me").as_deref(),
            Some("1g.10gb+me")
        );
        assert_eq!(mig_profile("NVIDIA A100-SXM4-80GB"), None);
        assert_eq!(mig_profile("x MIG "), None);
    }
}
