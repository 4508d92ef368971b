//! The one typed value every later step takes: what a container asks for, read once from the
//! `config.json` the caller parsed ([`ContainerRequest::read`]).
//!
//! The prestart hook, the runtime wrapper and `gpuhook doctor` each parse `config.json` once into
//! a `serde_json::Value` (kept for the write-back: the wrapper must never drop a field it does not
//! know) and build this from it; no step after that looks at the JSON again for the request.

use serde_json::Value;

use crate::cdi_name::{QualifiedName, NVIDIA_GPU_MPS_KIND};
use crate::error::RequestError;
use crate::gpu::{GpuRequest, ParseOutcome};
use crate::oci::{self, Env};
use crate::parse::{annotation_names, gpu_request};
use crate::policy::RequestPolicy;

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

#[cfg(test)]
#[path = "container_tests.rs"]
mod tests;
