//! The node's policy for reading requests: which sources a container may use, which capabilities
//! the node offers, and which pod annotations may name devices ([`crate::provenance`]).

use std::collections::BTreeSet;

use gpuhook_node::Capability;

use crate::cdi_name::NVIDIA_GPU_KIND;

/// Node policy for reading requests (from the config file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestPolicy {
    /// Honour `NVIDIA_VISIBLE_DEVICES` (and `NVIDIA_IMEX_CHANNELS`) from unprivileged containers.
    pub accept_envvar_when_unprivileged: bool,
    /// Read device ids from `/dev/null` mounts under `/var/run/nvidia-container-devices/`.
    pub accept_device_list_as_volume_mounts: bool,
    /// Capabilities this node offers; a request is intersected with them.
    pub supported_capabilities: BTreeSet<Capability>,
    /// CDI kind whose names are ours (`nvidia.com/gpu`).
    pub cdi_kind: String,
    /// Qualified-name globs a *pod* annotation may request (see [`crate::provenance`]); empty: none.
    pub pod_cdi_allow: Vec<String>,
    /// Keys of this container's `cdi.k8s.io/*` annotations that came from its pod
    /// ([`RequestPolicy::for_container`]); only names in `pod_cdi_allow` are read from them.
    pub pod_cdi_keys: BTreeSet<String>,
}

impl Default for RequestPolicy {
    fn default() -> Self {
        RequestPolicy {
            accept_envvar_when_unprivileged: true,
            accept_device_list_as_volume_mounts: false,
            supported_capabilities: Capability::ALL.into_iter().collect(),
            cdi_kind: NVIDIA_GPU_KIND.to_string(),
            pod_cdi_allow: Vec::new(),
            pod_cdi_keys: BTreeSet::new(),
        }
    }
}
