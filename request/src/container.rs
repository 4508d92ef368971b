//! The one typed value every later step takes: what a container asks for, read once from the
//! `config.json` the caller parsed ([`ContainerRequest::read`]).
//!
//! The prestart hook, the runtime wrapper and `gpuhook doctor` each parse `config.json` once into
//! a `serde_json::Value` (kept for the write-back: the wrapper must never drop a field it does not
//! know) and build this from it; no step after that looks at the JSON again for the request.

use std::collections::BTreeSet;

use gpuhook_node::{DeviceRef, Inventory};
use serde_json::Value;

use crate::oci::{self, Env};
use crate::parse::{annotation_names, gpu_request};
use crate::{
    resolve_selection, Capability, DeviceSelection, ImexChannels, ParseOutcome, QualifiedName,
    RequestError, RequestPolicy, RequestSource, RequirementReport, Requirements,
    NVIDIA_GPU_MPS_KIND,
};

/// What a container asks for: its CDI names of every kind and its request of our kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerRequest {
    /// `CAP_SYS_ADMIN` in the bounding set.
    pub privileged: bool,
    /// Every name of the admitted `cdi.k8s.io/*` annotations (a pod's own only when allow-listed,
    /// see [`crate::provenance`]), of any kind, validated, in annotation order, each once.
    pub cdi_names: Vec<QualifiedName>,
    /// The GPUs of the policy's kind it asks for, or why it asks for none.
    pub gpu: ParseOutcome,
}

impl ContainerRequest {
    /// Reads the request of the container whose OCI `config.json` is `config`, under `policy`
    /// (for a container of a pod: [`RequestPolicy::for_container`]).
    pub fn read(config: &Value, policy: &RequestPolicy) -> Result<Self, RequestError> {
        let env = Env::from_config(config)?;
        let raw_names = annotation_names(&oci::cdi_annotations(config)?, policy)?;
        let gpu = gpu_request(config, &env, &raw_names, policy)?;
        let mut cdi_names: Vec<QualifiedName> = Vec::with_capacity(raw_names.len());
        for q in raw_names {
            if !cdi_names.contains(&q) {
                cdi_names.push(q);
            }
        }
        Ok(ContainerRequest {
            privileged: oci::is_privileged(config),
            cdi_names,
            gpu,
        })
    }

    /// The GPU request of our kind, if there is one.
    pub fn gpu(&self) -> Option<&GpuRequest> {
        match &self.gpu {
            ParseOutcome::Gpu(r) => Some(r),
            ParseOutcome::NotGpu(_) => None,
        }
    }

    /// The CDI names of kind [`NVIDIA_GPU_MPS_KIND`] (MPS shares), in annotation order.
    pub fn mps_names(&self) -> Vec<String> {
        mps_names(&self.cdi_names)
    }
}

fn mps_names(names: &[QualifiedName]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for q in names.iter().filter(|q| q.is_kind(NVIDIA_GPU_MPS_KIND)) {
        let q = q.to_string();
        if !out.contains(&q) {
            out.push(q);
        }
    }
    out
}

/// Parses what the container described by `config` (an OCI `config.json`) asks of the policy's
/// kind: [`ContainerRequest::read`], for callers that need only that.
pub fn parse(config: &Value, policy: &RequestPolicy) -> Result<ParseOutcome, RequestError> {
    ContainerRequest::read(config, policy).map(|r| r.gpu)
}

/// The `cdi.k8s.io/*` annotation names of kind [`NVIDIA_GPU_MPS_KIND`], in annotation order,
/// each once. Names are validated (and bounded) as in [`parse`]; only the annotations are read.
pub fn mps_cdi_names(config: &Value, policy: &RequestPolicy) -> Result<Vec<String>, RequestError> {
    let names = annotation_names(&oci::cdi_annotations(config)?, policy)?;
    Ok(mps_names(&names))
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

#[cfg(test)]
#[path = "container_tests.rs"]
mod tests;
