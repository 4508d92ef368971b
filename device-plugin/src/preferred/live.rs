//! The preference the server asks for on a live node: topology read from NVML and sysfs when a
//! full-GPU request needs it (replicas and MIG devices do not), never cached, since links can
//! go down between requests.

use std::path::PathBuf;
use std::sync::Arc;

use gpuhook_node::topology::Topology;
use gpuhook_node::Nvml;
use gpuhook_sharing::Resource;

use super::{is_aligned, preferred_with_policy, AllocationPolicy, PreferredError};

/// Answers GetPreferredAllocation for the node `nvml` and `root` (the driver root, whose
/// `sys/bus/pci/devices/*/numa_node` gives NUMA nodes) describe.
#[derive(Debug, Clone)]
pub struct TopologyPreferrer {
    pub nvml: Arc<Nvml>,
    pub root: PathBuf,
    pub policy: AllocationPolicy,
}

impl TopologyPreferrer {
    /// [`super::preferred_with_policy`] with the node's topology; a topology that cannot be read
    /// only costs the preference (logged), as the kubelet falls back to its own choice anyway.
    pub fn prefer(
        &self,
        ad: &Resource,
        available: &[String],
        must_include: &[String],
        size: usize,
    ) -> Result<Vec<String>, PreferredError> {
        let topo = if is_aligned(ad, available) && size > 1 {
            match Topology::read(&self.nvml, &self.root) {
                Ok(t) => Some(t),
                Err(e) => {
                    tracing::warn!(error = %e, resource = %ad.name, "cannot read the GPU topology; preferring without it");
                    None
                }
            }
        } else {
            None
        };
        preferred_with_policy(
            ad,
            available,
            must_include,
            size,
            topo.as_ref(),
            self.policy,
        )
    }
}
