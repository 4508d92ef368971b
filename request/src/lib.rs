//! What a container asks for, parsed from its (untrusted) OCI `config.json`.
//!
//! The prestart hook and the runtime wrapper run as root with input chosen by the image author, so
//! this module is strict (every malformed value is an error that names it), bounded (see
//! [`limits`]) and side-effect free: parsing ([`parse`]) needs no discovery, resolution
//! ([`ContainerRequest::resolve`]) needs only an [`Inventory`]. An error means nothing is injected.
//!
//! Sources, first one that yields something wins ([`RequestSource`]): `cdi.k8s.io/*` annotations
//! (a pod's own only for allow-listed devices: [`provenance`]),
//! then `/var/run/nvidia-container-devices/` mounts (if enabled), then `NVIDIA_VISIBLE_DEVICES`
//! (from an unprivileged container only if allowed), then the legacy-image default.

mod capabilities;
mod cdi_name;
mod devices;
mod error;
mod extras;
pub mod limits;
mod oci;
pub mod provenance;
mod require;
mod require_eval;
mod resolve;
#[cfg(test)]
mod test_support;

use std::collections::BTreeSet;

use gpuhook_node::{Capability, DeviceRef, Inventory};
use serde_json::Value;

pub use capabilities::{parse_capabilities, parse_capability, DEFAULT_CAPABILITIES};
pub use cdi_name::{
    validate_class, validate_device_name, validate_vendor, QualifiedName, NVIDIA_GPU_KIND,
    NVIDIA_GPU_MPS_KIND,
};
pub use devices::{normalize_pci_bus_id, parse_id, DeviceId, DeviceSelection};
pub use error::{RequestError, RequestSource};
pub use extras::{
    check_feature_gates, parse_imex_channels, parse_mig_access, parse_mps_pipe_dir, ImexChannels,
    FEATURE_GATES,
};
pub use oci::{CDI_ANNOTATION_PREFIX, DEVICE_LIST_MOUNT_ROOT};
pub use provenance::glob_match;
pub use require::{
    compare_versions, is_truthy, legacy_cuda_constraint, parse_expression, parse_version,
    Constraint, Factor, Op, Property, Requirements, Term, Value as RequirementValue,
};
pub use require_eval::RequirementReport;
pub use resolve::{all_devices, resolve_id, resolve_selection, ResolvedDevices};

use devices::{parse_entries, parse_visible_devices, ListOutcome};
use oci::Env;

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
    /// Qualified-name globs a *pod* annotation may request (see [`provenance`]); empty: none.
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

/// Result of [`parse`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseOutcome {
    /// Nothing to inject.
    NotGpu(NotGpuReason),
    Gpu(ContainerRequest),
}

/// A GPU container's request, not yet checked against a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerRequest {
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

impl ContainerRequest {
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

/// Parses what the container described by `config` (an OCI `config.json`) asks for.
pub fn parse(config: &Value, policy: &RequestPolicy) -> Result<ParseOutcome, RequestError> {
    let env = Env::from_config(config)?;
    let privileged = oci::is_privileged(config);
    let env_accepted = privileged || policy.accept_envvar_when_unprivileged;
    let legacy_image =
        env.non_empty("CUDA_VERSION").is_some() && env.non_empty("NVIDIA_REQUIRE_CUDA").is_none();

    let Some((source, devices)) = select_devices(config, policy, &env, env_accepted, legacy_image)?
    else {
        return Ok(ParseOutcome::NotGpu(NotGpuReason::NoRequest));
    };
    let devices = match devices {
        Ok(d) => d,
        Err(reason) => return Ok(ParseOutcome::NotGpu(reason)),
    };

    check_feature_gates(|k| env.get(k))?;
    let mut capabilities = parse_capabilities(env.get("NVIDIA_DRIVER_CAPABILITIES"), legacy_image)?;
    capabilities.retain(|c| policy.supported_capabilities.contains(c));
    let disabled = env.get("NVIDIA_DISABLE_REQUIRE").is_some_and(is_truthy);
    let require_vars: Vec<_> = env
        .with_prefix("NVIDIA_REQUIRE_")
        .into_iter()
        .filter(|(k, _)| *k != "NVIDIA_REQUIRE_JETPACK")
        .collect();
    let legacy_cuda = if legacy_image {
        env.get("CUDA_VERSION")
    } else {
        None
    };
    let requirements = Requirements::parse(&require_vars, legacy_cuda, disabled)?;
    let imex_channels = if env_accepted {
        parse_imex_channels(env.get("NVIDIA_IMEX_CHANNELS"))?
    } else {
        ImexChannels::None
    };

    Ok(ParseOutcome::Gpu(ContainerRequest {
        source,
        privileged,
        legacy_image,
        devices,
        capabilities,
        requirements,
        mig_config: parse_mig_access(
            "NVIDIA_MIG_CONFIG_DEVICES",
            env.get("NVIDIA_MIG_CONFIG_DEVICES"),
            privileged,
        )?,
        mig_monitor: parse_mig_access(
            "NVIDIA_MIG_MONITOR_DEVICES",
            env.get("NVIDIA_MIG_MONITOR_DEVICES"),
            privileged,
        )?,
        imex_channels,
        mps_pipe_dir: parse_mps_pipe_dir(env.get("CUDA_MPS_PIPE_DIRECTORY"))?,
        cdi_kind: policy.cdi_kind.clone(),
    }))
}

/// The `cdi.k8s.io/*` annotation names of kind [`NVIDIA_GPU_MPS_KIND`], in annotation order,
/// each once. Names are validated (and bounded) as in [`parse`].
pub fn mps_cdi_names(config: &Value, policy: &RequestPolicy) -> Result<Vec<String>, RequestError> {
    let mut out: Vec<String> = Vec::new();
    for q in annotation_names(config, policy)? {
        if q.is_kind(NVIDIA_GPU_MPS_KIND) {
            let q = q.to_string();
            if !out.contains(&q) {
                out.push(q);
            }
        }
    }
    Ok(out)
}

/// Every qualified CDI name in the `cdi.k8s.io/*` annotations the policy admits (no refused pod
/// annotation), in annotation order: each value is bounded in size, the names are bounded in
/// number, and each must be a valid qualified name.
pub fn annotation_names(
    config: &Value,
    policy: &RequestPolicy,
) -> Result<Vec<QualifiedName>, RequestError> {
    let mut names = Vec::new();
    for (key, value) in oci::cdi_annotations(config)? {
        if value.len() > limits::MAX_ID_LIST_BYTES {
            return Err(RequestError::limit(
                format!(
                    "annotation {:?} ({} bytes)",
                    error::preview(key),
                    value.len()
                ),
                limits::bytes(limits::MAX_ID_LIST_BYTES),
            ));
        }
        let admitted = value
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty() && policy.admits(key, n));
        for name in admitted {
            if names.len() == limits::MAX_ID_ENTRIES {
                return Err(RequestError::limit(
                    "the CDI annotations",
                    format!("{} entries", limits::MAX_ID_ENTRIES),
                ));
            }
            names.push(QualifiedName::parse_reason(name).map_err(|reason| {
                RequestError::InvalidCdiName {
                    name: error::preview(name),
                    origin: RequestSource::CdiAnnotations,
                    reason: format!("annotation {}: {reason}", error::preview(key)),
                }
            })?);
        }
    }
    Ok(names)
}

type Selected = Option<(RequestSource, Result<DeviceSelection, NotGpuReason>)>;

/// Walks the sources in order; `None` when none yields anything.
fn select_devices(
    config: &Value,
    policy: &RequestPolicy,
    env: &Env<'_>,
    env_accepted: bool,
    legacy_image: bool,
) -> Result<Selected, RequestError> {
    let ours: Vec<DeviceId> = annotation_names(config, policy)?
        .into_iter()
        .filter(|q| q.is_kind(&policy.cdi_kind))
        .map(DeviceId::Cdi)
        .collect();
    if !ours.is_empty() {
        return Ok(Some((
            RequestSource::CdiAnnotations,
            Ok(DeviceSelection::Ids(ours)),
        )));
    }

    if policy.accept_device_list_as_volume_mounts {
        let ids = oci::mount_device_ids(config)?;
        // `cdi/<qualified name>` is a CDI name; everything else is an NVIDIA_VISIBLE_DEVICES entry.
        let entries = ids.iter().map(|id| id.strip_prefix("cdi/").unwrap_or(id));
        match parse_entries(entries, RequestSource::VolumeMounts)? {
            ListOutcome::Empty => {}
            ListOutcome::Void => {
                return Ok(Some((RequestSource::VolumeMounts, Err(NotGpuReason::Void))))
            }
            ListOutcome::Selection(s) => return Ok(Some((RequestSource::VolumeMounts, Ok(s)))),
        }
    }

    match env.get("NVIDIA_VISIBLE_DEVICES") {
        Some(_) if !env_accepted => Ok(Some((
            RequestSource::EnvVar,
            Err(NotGpuReason::EnvVarNotAccepted),
        ))),
        Some(value) => Ok(match parse_visible_devices(value, RequestSource::EnvVar)? {
            ListOutcome::Empty => None,
            ListOutcome::Void => Some((RequestSource::EnvVar, Err(NotGpuReason::Void))),
            ListOutcome::Selection(s) => Some((RequestSource::EnvVar, Ok(s))),
        }),
        None if legacy_image && env_accepted => {
            Ok(Some((RequestSource::LegacyImage, Ok(DeviceSelection::All))))
        }
        None => Ok(None),
    }
}

/// Cheap pre-check for the container start path: `false` means [`parse`] would find nothing to do
/// (or an error a non-GPU container must not be failed for), so the hook can exit without discovery.
/// It only borrows from `config` and allocates nothing.
pub fn is_gpu_container(config: &Value, policy: &RequestPolicy) -> bool {
    let kind = policy.cdi_kind.as_str();
    let of_kind = |name: &str, kind: &str| {
        name.trim()
            .strip_prefix(kind)
            .is_some_and(|r| r.starts_with('='))
    };
    // MPS shares are GPUs too: the hook resolves them through the CDI spec directories.
    let ours = |name: &str| of_kind(name, kind) || of_kind(name, NVIDIA_GPU_MPS_KIND);
    if let Some(map) = config.get("annotations").and_then(Value::as_object) {
        let cdi = map
            .iter()
            .filter(|(k, _)| k.starts_with(CDI_ANNOTATION_PREFIX));
        if cdi
            .filter_map(|(k, v)| Some((k, v.as_str()?)))
            .any(|(k, v)| v.split(',').any(|n| ours(n) && policy.admits(k, n)))
        {
            return true;
        }
    }
    if policy.accept_device_list_as_volume_mounts {
        if let Some(mounts) = config.get("mounts").and_then(Value::as_array) {
            let has = mounts.iter().any(|m| {
                m.get("source").and_then(Value::as_str) == Some("/dev/null")
                    && m.get("destination")
                        .and_then(Value::as_str)
                        .is_some_and(|d| {
                            d.strip_prefix(DEVICE_LIST_MOUNT_ROOT)
                                .and_then(|r| r.strip_prefix('/'))
                                .is_some_and(|r| !r.trim_end_matches('/').is_empty())
                        })
            });
            if has {
                return true;
            }
        }
    }
    let (mut visible, mut cuda, mut require_cuda) = (None, None, None);
    for entry in config
        .get("process")
        .and_then(|p| p.get("env"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let Some((k, v)) = entry.as_str().and_then(|e| e.split_once('=')) else {
            continue;
        };
        match k {
            "NVIDIA_VISIBLE_DEVICES" => visible = Some(v),
            "CUDA_VERSION" => cuda = Some(v),
            "NVIDIA_REQUIRE_CUDA" => require_cuda = Some(v),
            _ => {}
        }
    }
    if !(policy.accept_envvar_when_unprivileged || oci::is_privileged(config)) {
        return false;
    }
    match visible {
        Some(v) => {
            let mut tokens = v.split(',').map(str::trim).filter(|t| !t.is_empty());
            !tokens.clone().any(|t| t.eq_ignore_ascii_case("void")) && tokens.next().is_some()
        }
        None => cuda.is_some_and(|c| !c.is_empty()) && require_cuda.unwrap_or_default().is_empty(),
    }
}

#[cfg(test)]
mod tests;
