//! The node's GPUs and MIG GPU instances as the exporter labels them (dcgm-exporter's `gpu`,
//! `UUID`, `pci_bus_id`, `device`, `modelName`, `GPU_I_PROFILE`, `GPU_I_ID`), read at start and
//! again at every sample (a MIG re-partition is followed).

use gpuhook_node::{NodeError, Nvml};

/// A MIG GPU instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigInstance {
    /// `1g.10gb`, from the MIG device's NVML name (`<GPU name> MIG <profile>`).
    pub profile: String,
    pub gi: u32,
    /// The MIG device's UUID (`MIG-…`), whose handle answers memory and processes.
    pub uuid: String,
    /// Its index under the parent (`nvmlDeviceGetMigDeviceHandleByIndex`).
    pub index: u32,
}

/// A physical GPU and its MIG instances (none without MIG).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuInfo {
    pub index: u32,
    pub uuid: String,
    /// NVML's form: `00000000:41:00.0` (hex digits upper case, as DCGM reports it).
    pub pci_bus_id: String,
    pub model: String,
    pub brand: String,
    pub mig: bool,
    pub instances: Vec<MigInstance>,
}

impl GpuInfo {
    /// Entities with series: the GPU (index 0) then each MIG instance (index 1 + i).
    pub fn entity_count(&self) -> usize {
        1 + self.instances.len()
    }
}

/// Reads one GPU; MIG devices sharing a GPU instance (several compute instances) are one
/// instance, as DCGM's GPU-instance entity is.
pub fn read_gpu(nvml: &Nvml, index: u32) -> Result<GpuInfo, NodeError> {
    let dev = nvml.device_by_index(index)?;
    let mig = dev.mig_enabled().unwrap_or(false);
    let model = dev.name()?;
    let mut instances: Vec<MigInstance> = Vec::new();
    if mig {
        let max = dev.max_mig_device_count().unwrap_or(0);
        for i in 0..max {
            let Some(m) = dev.mig_device_by_index(i)? else {
                continue;
            };
            let gi = m.gpu_instance_id()?;
            if instances.iter().any(|x| x.gi == gi) {
                continue;
            }
            let name = m.name()?;
            let profile = name
                .rsplit_once(" MIG ")
                .map_or_else(|| name.clone(), |(_, p)| p.to_string());
            instances.push(MigInstance {
                profile,
                gi,
                uuid: m.uuid()?,
                index: i,
            });
        }
    }
    Ok(GpuInfo {
        index,
        uuid: dev.uuid()?,
        pci_bus_id: dev.pci_bus_id()?.to_ascii_uppercase(),
        brand: dev.brand().ok().flatten().unwrap_or("").to_string(),
        model,
        mig,
        instances,
    })
}

/// Every GPU NVML lists; one that cannot be read is logged and left out (it has no labels).
pub fn read_all(nvml: &Nvml) -> Result<Vec<GpuInfo>, NodeError> {
    let n = nvml.device_count()?;
    let mut out = Vec::new();
    for i in 0..n {
        match read_gpu(nvml, i) {
            Ok(g) => out.push(g),
            Err(e) => {
                tracing::warn!(gpu = i, error = %e, "cannot read this GPU's identity; it is not exported")
            }
        }
    }
    Ok(out)
}
