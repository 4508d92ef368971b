//! NVML's running processes as holders: the compute, graphics and MPS-client processes of each
//! GPU whose MIG mode is off, and of each MIG device of the others (a MIG device handle lists
//! its own processes).

use gpuhook_node::nvml::{Device, ProcessKind};
use gpuhook_node::NodeError;

use crate::error::MigError;
use crate::holders::{DeviceHolders, Holder};
use crate::nvml_backend::{nvml_err, NvmlBackend};

/// NVML's codes for a process list the driver does not offer.
const NOT_SUPPORTED: u32 = 3;
const FUNCTION_NOT_FOUND: u32 = 13;

const KINDS: [(ProcessKind, &str); 3] = [
    (ProcessKind::Compute, "compute"),
    (ProcessKind::Graphics, "graphics"),
    (ProcessKind::Mps, "MPS client"),
];

/// Adds the processes of `dev` under `uuid`. A list the driver does not offer is skipped (the
/// others, and NVML's own `IN_USE`, still protect); any other error fails.
fn add_processes(
    out: &mut DeviceHolders,
    dev: &Device<'_>,
    uuid: &str,
    index: u32,
) -> Result<(), MigError> {
    for (kind, name) in KINDS {
        match dev.processes(kind) {
            Ok(list) => {
                for p in list {
                    out.add(
                        uuid,
                        Holder::Process {
                            pid: p.pid,
                            kind: name,
                        },
                    );
                }
            }
            Err(NodeError::Nvml { code, .. })
                if code == NOT_SUPPORTED || code == FUNCTION_NOT_FOUND => {}
            Err(e) => return Err(nvml_err(index, e)),
        }
    }
    Ok(())
}

impl NvmlBackend {
    /// Who NVML says runs on each GPU and MIG device, by UUID.
    pub fn device_processes(&self) -> Result<DeviceHolders, MigError> {
        let mut out = DeviceHolders::default();
        let nvml = self.nvml();
        for index in 0..nvml.device_count().map_err(MigError::Node)? {
            let e = |err| nvml_err(index, err);
            let dev = nvml.device_by_index(index).map_err(e)?;
            if !dev.mig_enabled().map_err(e)? {
                add_processes(&mut out, &dev, &dev.uuid().map_err(e)?, index)?;
                continue;
            }
            for i in 0..dev.max_mig_device_count().map_err(e)? {
                if let Some(m) = dev.mig_device_by_index(i).map_err(e)? {
                    add_processes(&mut out, &m, &m.uuid().map_err(e)?, index)?;
                }
            }
        }
        Ok(out)
    }
}
