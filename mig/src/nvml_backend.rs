//! The real [`MigBackend`]: gpuhook-node's NVML, loaded from the driver root only.

use gpuhook_node::nvml::{MigApi, Nvml};
use gpuhook_node::NodeError;

use crate::apply::MigBackend;
use crate::device_id::DeviceId;
use crate::error::MigError;
use crate::state::{ComputeInstance, GiProfileInfo, GpuInstance, GpuState, MigMode, Placement};

/// NVML as a [`MigBackend`]. GPU indexes are NVML's (PCI order on a real node).
#[derive(Debug)]
pub struct NvmlBackend {
    nvml: Nvml,
}

pub(crate) fn nvml_err(index: u32, e: NodeError) -> MigError {
    match e {
        NodeError::Nvml {
            call,
            code,
            message,
            ..
        } => MigError::Nvml {
            index,
            call,
            code,
            message,
        },
        other => MigError::Node(other),
    }
}

impl NvmlBackend {
    pub fn new(nvml: Nvml) -> NvmlBackend {
        NvmlBackend { nvml }
    }

    pub(crate) fn nvml(&self) -> &Nvml {
        &self.nvml
    }

    fn api(&self) -> Result<MigApi<'_>, MigError> {
        self.nvml.mig().map_err(MigError::Node)
    }

    fn read(&self, index: u32) -> Result<GpuState, MigError> {
        let api = self.api()?;
        let e = |err| nvml_err(index, err);
        let dev = self.nvml.device_by_index(index).map_err(e)?;
        let (pci, sub) = api.pci_ids(index).map_err(e)?;
        let mode = api.mode(index).map_err(e)?;
        let mig = match mode {
            None => MigMode::NotCapable,
            Some((current, pending)) => MigMode::Capable { current, pending },
        };
        let mut state = GpuState {
            index,
            uuid: dev.uuid().map_err(e)?,
            model: dev.name().map_err(e)?,
            device_id: DeviceId::from_nvml(pci, Some(sub)),
            mig,
            profiles: Vec::new(),
            compute_slices: 0,
            instances: Vec::new(),
        };
        if mig == MigMode::NotCapable {
            return Ok(state);
        }
        // With MIG mode off: the profiles and placements only (NVML lists them, named as
        // go-nvlib names them; there are no instances).
        let uuids = if mig.enabled() {
            mig_uuids(&self.nvml, index)?
        } else {
            Vec::new()
        };
        for p in api.profiles(index).map_err(e)? {
            let gis = if mig.enabled() {
                api.gpu_instances(index, p.id).map_err(e)?
            } else {
                Vec::new()
            };
            for gi in gis {
                let cis = api
                    .compute_instances(index, gi.id)
                    .map_err(e)?
                    .into_iter()
                    .map(|c| ComputeInstance {
                        id: c.id,
                        profile_id: c.profile_id,
                        slices: c.slices,
                        uuid: uuids
                            .iter()
                            .find(|u| u.0 == gi.id && u.1 == c.id)
                            .map(|u| u.2.clone()),
                    })
                    .collect();
                state.instances.push(GpuInstance {
                    id: gi.id,
                    profile_id: gi.profile_id,
                    placement: Placement {
                        start: gi.placement.0,
                        size: gi.placement.1,
                    },
                    cis,
                });
            }
            state.compute_slices = state.compute_slices.max(p.slices);
            state.profiles.push(GiProfileInfo {
                id: p.id,
                name: p.name,
                slices: p.slices,
                instance_count: p.instance_count,
                memory_mib: p.memory_mib,
                engines: Some(p.engines),
                placements: p
                    .placements
                    .into_iter()
                    .map(|(start, size)| Placement { start, size })
                    .collect(),
            });
        }
        state.instances.sort_by_key(|g| g.id);
        Ok(state)
    }
}

/// `(gi, ci, uuid)` of every MIG device of a GPU.
fn mig_uuids(nvml: &Nvml, index: u32) -> Result<Vec<(u32, u32, String)>, MigError> {
    let e = |err| nvml_err(index, err);
    let dev = nvml.device_by_index(index).map_err(e)?;
    let mut out = Vec::new();
    for i in 0..dev.max_mig_device_count().map_err(e)? {
        if let Some(m) = dev.mig_device_by_index(i).map_err(e)? {
            out.push((
                m.gpu_instance_id().map_err(e)?,
                m.compute_instance_id().map_err(e)?,
                m.uuid().map_err(e)?,
            ));
        }
    }
    Ok(out)
}

impl MigBackend for NvmlBackend {
    fn gpus(&mut self) -> Result<Vec<GpuState>, MigError> {
        let n = self.nvml.device_count().map_err(MigError::Node)?;
        (0..n).map(|i| self.read(i)).collect()
    }

    fn gpu(&mut self, index: u32) -> Result<GpuState, MigError> {
        self.read(index)
    }

    fn set_mig_mode(&mut self, index: u32, enabled: bool) -> Result<bool, MigError> {
        self.api()?
            .set_mode(index, enabled)
            .map_err(|e| nvml_err(index, e))
    }

    fn create_gpu_instance(
        &mut self,
        index: u32,
        profile_id: u32,
        placement: Option<Placement>,
    ) -> Result<u32, MigError> {
        self.api()?
            .create_gpu_instance(index, profile_id, placement.map(|p| (p.start, p.size)))
            .map_err(|e| nvml_err(index, e))
    }

    fn create_compute_instance(
        &mut self,
        index: u32,
        gi: u32,
        ci_profile_id: u32,
    ) -> Result<u32, MigError> {
        self.api()?
            .create_compute_instance(index, gi, ci_profile_id)
            .map_err(|e| nvml_err(index, e))
    }

    fn destroy_compute_instance(&mut self, index: u32, gi: u32, ci: u32) -> Result<(), MigError> {
        self.api()?
            .destroy_compute_instance(index, gi, ci)
            .map_err(|e| nvml_err(index, e))
    }

    fn destroy_gpu_instance(&mut self, index: u32, gi: u32) -> Result<(), MigError> {
        self.api()?
            .destroy_gpu_instance(index, gi)
            .map_err(|e| nvml_err(index, e))
    }
}
