//! An in-memory [`MigBackend`] with NVML's rules (profile tables and placements from
//! `gpuhook_sim::mig_catalog`), counting write calls.

use gpuhook_sim::mig_catalog::{gi_id_for, product_for, MigProduct};

use crate::apply::MigBackend;
use crate::device_id::DeviceId;
use crate::error::{MigError, NVML_ERROR_INSUFFICIENT_RESOURCES, NVML_ERROR_IN_USE};
use crate::state::{ComputeInstance, GiProfileInfo, GpuInstance, GpuState, MigMode, Placement};

#[derive(Debug)]
pub struct FakeGpu {
    pub product: &'static MigProduct,
    pub state: GpuState,
    /// A mode change needs a reset (it stays pending).
    pub needs_reset: bool,
    /// GPU instance ids with a process on them.
    pub busy: Vec<u32>,
}

#[derive(Debug, Default)]
pub struct Fake {
    pub gpus: Vec<FakeGpu>,
    pub writes: Vec<String>,
}

pub fn profiles_of(product: &MigProduct) -> Vec<GiProfileInfo> {
    product
        .profiles
        .iter()
        .map(|p| GiProfileInfo {
            id: p.id,
            name: p.name.to_string(),
            slices: p.slices,
            instance_count: p.instance_count,
            memory_mib: p.memory_mib,
            engines: None,
            placements: p
                .starts
                .iter()
                .map(|&start| Placement {
                    start,
                    size: p.size,
                })
                .collect(),
        })
        .collect()
}

impl Fake {
    /// GPUs of these models (NVML names), MIG off.
    pub fn new(models: &[&str]) -> Fake {
        let gpus = models
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let product = product_for(m).expect("a MIG product");
                let index = u32::try_from(i).unwrap();
                FakeGpu {
                    product,
                    state: GpuState {
                        index,
                        uuid: format!("GPU-{index:08x}-0000-0000-0000-000000000000"),
                        model: m.to_string(),
                        device_id: DeviceId {
                            device: 0x20b2,
                            vendor: 0x10de,
                            subsystem: None,
                        },
                        mig: MigMode::Capable {
                            current: false,
                            pending: false,
                        },
                        profiles: Vec::new(),
                        compute_slices: product.compute_slices,
                        instances: Vec::new(),
                    },
                    needs_reset: false,
                    busy: Vec::new(),
                }
            })
            .collect();
        Fake {
            gpus,
            writes: Vec::new(),
        }
    }

    /// MIG on (no reset needed) for every GPU.
    pub fn enabled(models: &[&str]) -> Fake {
        let mut f = Fake::new(models);
        for i in 0..f.gpus.len() {
            f.set_mig_mode(u32::try_from(i).unwrap(), true).unwrap();
        }
        f.writes.clear();
        f
    }

    fn g(&mut self, index: u32) -> Result<&mut FakeGpu, MigError> {
        self.gpus
            .get_mut(index as usize)
            .ok_or_else(|| MigError::NotFound(format!("no GPU {index}")))
    }
}

fn nvml(index: u32, call: &'static str, code: u32) -> MigError {
    MigError::Nvml {
        index,
        call,
        code,
        message: format!("NVML error {code}"),
    }
}

impl MigBackend for Fake {
    fn gpus(&mut self) -> Result<Vec<GpuState>, MigError> {
        Ok(self.gpus.iter().map(|g| g.state.clone()).collect())
    }

    fn gpu(&mut self, index: u32) -> Result<GpuState, MigError> {
        Ok(self.g(index)?.state.clone())
    }

    fn set_mig_mode(&mut self, index: u32, enabled: bool) -> Result<bool, MigError> {
        self.writes.push(format!("{index}:mode:{enabled}"));
        let g = self.g(index)?;
        let MigMode::Capable { current, .. } = g.state.mig else {
            return Err(nvml(index, "nvmlDeviceSetMigMode", 3));
        };
        if !g.busy.is_empty() || (current && !g.state.instances.is_empty()) {
            return Err(nvml(index, "nvmlDeviceSetMigMode", NVML_ERROR_IN_USE));
        }
        if g.needs_reset && current != enabled {
            g.state.mig = MigMode::Capable {
                current,
                pending: enabled,
            };
            return Ok(true);
        }
        g.state.mig = MigMode::Capable {
            current: enabled,
            pending: enabled,
        };
        g.state.profiles = if enabled {
            profiles_of(g.product)
        } else {
            Vec::new()
        };
        Ok(false)
    }

    fn create_gpu_instance(
        &mut self,
        index: u32,
        profile_id: u32,
        placement: Option<Placement>,
    ) -> Result<u32, MigError> {
        self.writes
            .push(format!("{index}:cgi:{profile_id}:{placement:?}"));
        let g = self.g(index)?;
        let prof = g
            .state
            .profile_by_id(profile_id)
            .cloned()
            .ok_or_else(|| nvml(index, "nvmlDeviceCreateGpuInstanceWithPlacement", 2))?;
        let placement = placement.ok_or_else(|| nvml(index, "nvmlDeviceCreateGpuInstance", 3))?;
        let taken = g
            .state
            .instances
            .iter()
            .any(|i| i.placement.overlaps(&placement));
        let count = g
            .state
            .instances
            .iter()
            .filter(|i| i.profile_id == profile_id)
            .count();
        if !prof.placements.contains(&placement) || taken || count >= prof.instance_count as usize {
            return Err(nvml(
                index,
                "nvmlDeviceCreateGpuInstanceWithPlacement",
                NVML_ERROR_INSUFFICIENT_RESOURCES,
            ));
        }
        let id = gi_id_for(g.product.memory_slices, placement.start, placement.size).unwrap();
        g.state.instances.push(GpuInstance {
            id,
            profile_id,
            placement,
            cis: Vec::new(),
        });
        g.state.instances.sort_by_key(|i| i.id);
        Ok(id)
    }

    fn create_compute_instance(
        &mut self,
        index: u32,
        gi: u32,
        ci_profile_id: u32,
    ) -> Result<u32, MigError> {
        self.writes
            .push(format!("{index}:cci:{gi}:{ci_profile_id}"));
        let g = self.g(index)?;
        let slices = [1, 2, 3, 4, 7, 8, 6][ci_profile_id as usize];
        let gi_slices = g
            .state
            .instances
            .iter()
            .find(|i| i.id == gi)
            .and_then(|i| g.state.profile_by_id(i.profile_id))
            .map(|p| p.slices)
            .unwrap();
        let inst = g.state.instances.iter_mut().find(|i| i.id == gi).unwrap();
        let used: u32 = inst.cis.iter().map(|c| c.slices).sum();
        if used + slices > gi_slices {
            return Err(nvml(
                index,
                "nvmlGpuInstanceCreateComputeInstance",
                NVML_ERROR_INSUFFICIENT_RESOURCES,
            ));
        }
        let id = (0..8)
            .find(|i| !inst.cis.iter().any(|c| c.id == *i))
            .unwrap();
        let uuid = Some(format!(
            "MIG-{index:02x}{gi:02x}{id:02x}00-0000-0000-0000-000000000000"
        ));
        inst.cis.push(ComputeInstance {
            id,
            profile_id: ci_profile_id,
            slices,
            uuid,
        });
        Ok(id)
    }

    fn destroy_compute_instance(&mut self, index: u32, gi: u32, ci: u32) -> Result<(), MigError> {
        self.writes.push(format!("{index}:dci:{gi}:{ci}"));
        let g = self.g(index)?;
        if g.busy.contains(&gi) {
            return Err(nvml(index, "nvmlComputeInstanceDestroy", NVML_ERROR_IN_USE));
        }
        let inst = g
            .state
            .instances
            .iter_mut()
            .find(|i| i.id == gi)
            .ok_or_else(|| nvml(index, "nvmlComputeInstanceDestroy", 6))?;
        inst.cis.retain(|c| c.id != ci);
        Ok(())
    }

    fn destroy_gpu_instance(&mut self, index: u32, gi: u32) -> Result<(), MigError> {
        self.writes.push(format!("{index}:dgi:{gi}"));
        let g = self.g(index)?;
        if g.busy.contains(&gi) {
            return Err(nvml(index, "nvmlGpuInstanceDestroy", NVML_ERROR_IN_USE));
        }
        g.state.instances.retain(|i| i.id != gi);
        Ok(())
    }
}
