//! What a container asks of our kind (GPUs, capabilities, requirements, extras), and the same
//! resolved against a node's inventory.

use std::collections::BTreeSet;

use gpuhook_node::{Capability, DeviceRef, Inventory};

use crate::cdi_name::QualifiedName;
use crate::devices::DeviceSelection;
use crate::error::{RequestError, RequestSource};
use crate::extras::ImexChannels;
use crate::require::Requirements;
use crate::require_eval::RequirementReport;
use crate::resolve::resolve_selection;

/// Why a container is not a GPU container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotGpuReason {
    /// No source asked for anything.
    NoRequest,
    /// `void` in the device list.
    Void,
    /// `NVIDIA_VISIBLE_DEVICES` set by an unprivileged container while the policy refuses it.
    EnvVarNotAccepted,
}

/// What a container asks of the policy's kind ([`crate::ContainerRequest::gpu`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseOutcome {
    /// Nothing to inject.
    NotGpu(NotGpuReason),
    Gpu(GpuRequest),
}

/// What a GPU container asks of the policy's kind, not yet checked against a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuRequest {
    pub source: RequestSource,
    /// `CAP_SYS_ADMIN` in the bounding set.
    pub privileged: bool,
    /// `CUDA_VERSION` set and `NVIDIA_REQUIRE_CUDA` not.
    pub legacy_image: bool,
    pub devices: DeviceSelection,
    /// Expanded and restricted to the policy's supported capabilities.
    pub capabilities: BTreeSet<Capability>,
    pub requirements: Requirements,
    pub mig_config: bool,
    pub mig_monitor: bool,
    pub imex_channels: ImexChannels,
    pub mps_pipe_dir: Option<String>,
    /// The CDI kind of the policy, for resolution.
    pub cdi_kind: String,
}

/// A request resolved against a node: everything `prestart` needs to build the edits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedRequest {
    pub source: RequestSource,
    /// Deduplicated, in request order. A MIG device implies its parent's node.
    pub devices: Vec<DeviceRef>,
    /// Names of other CDI kinds found in the request (ignored; worth a log line).
    pub foreign_cdi: Vec<QualifiedName>,
    pub capabilities: BTreeSet<Capability>,
    pub mig_config: bool,
    pub mig_monitor: bool,
    pub imex_channels: ImexChannels,
    pub mps_pipe_dir: Option<String>,
    /// Requirement factors that could not be verified on this node.
    pub requirements: RequirementReport,
}

impl GpuRequest {
    /// Resolves the devices and checks the requirements against `inv`.
    pub fn resolve(&self, inv: &Inventory) -> Result<ResolvedRequest, RequestError> {
        let resolved = resolve_selection(&self.devices, inv, self.source, &self.cdi_kind)?;
        let requirements = self.requirements.check(inv, &resolved.devices)?;
        Ok(ResolvedRequest {
            source: self.source,
            devices: resolved.devices,
            foreign_cdi: resolved.foreign_cdi,
            capabilities: self.capabilities.clone(),
            mig_config: self.mig_config,
            mig_monitor: self.mig_monitor,
            imex_channels: self.imex_channels.clone(),
            mps_pipe_dir: self.mps_pipe_dir.clone(),
            requirements,
        })
    }
}
