//! From a container's environment and annotations to what it asks for: the request sources in
//! order (`cdi.k8s.io/*` annotations, volume-mount device lists, `NVIDIA_VISIBLE_DEVICES`, the
//! legacy-image default), then capabilities, requirements and the extras. Strict: every malformed
//! value is an error that names it.

use serde_json::Value;

use crate::capabilities::parse_capabilities;
use crate::cdi_name::QualifiedName;
use crate::devices::{parse_entries, parse_visible_devices, ListOutcome};
use crate::devices::{DeviceId, DeviceSelection};
use crate::error::{self, RequestError, RequestSource};
use crate::extras::{
    check_feature_gates, parse_imex_channels, parse_mig_access, parse_mps_pipe_dir, ImexChannels,
};
use crate::gpu::{GpuRequest, NotGpuReason, ParseOutcome};
use crate::limits;
use crate::oci::{self, Env};
use crate::policy::RequestPolicy;
use crate::require::{is_truthy, Requirements};

/// What the container asks of the policy's kind, given its environment and the names of its
/// admitted `cdi.k8s.io/*` annotations (`cdi_names`, as [`annotation_names`] read them).
pub(crate) fn gpu_request(
    config: &Value,
    env: &Env<'_>,
    cdi_names: &[QualifiedName],
    policy: &RequestPolicy,
) -> Result<ParseOutcome, RequestError> {
    let privileged = oci::is_privileged(config);
    let env_accepted = privileged || policy.accept_envvar_when_unprivileged;
    let legacy_image =
        env.non_empty("CUDA_VERSION").is_some() && env.non_empty("NVIDIA_REQUIRE_CUDA").is_none();

    let sources = Sources {
        config,
        policy,
        env,
        env_accepted,
        legacy_image,
    };
    let Some((source, devices)) = sources.select(cdi_names)? else {
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

    Ok(ParseOutcome::Gpu(GpuRequest {
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

/// Every qualified CDI name in the `cdi.k8s.io/*` annotations the policy admits (no refused pod
/// annotation), in annotation order: each value is bounded in size, the names are bounded in
/// number, and each must be a valid qualified name.
pub(crate) fn annotation_names(
    annotations: &[(&str, &str)],
    policy: &RequestPolicy,
) -> Result<Vec<QualifiedName>, RequestError> {
    let mut names = Vec::new();
    for &(key, value) in annotations {
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

/// The request sources of one container, and what the policy lets it use.
struct Sources<'a, 'e> {
    config: &'a Value,
    policy: &'a RequestPolicy,
    env: &'a Env<'e>,
    env_accepted: bool,
    legacy_image: bool,
}

impl Sources<'_, '_> {
    /// Walks the sources in order; `None` when none yields anything.
    fn select(&self, cdi_names: &[QualifiedName]) -> Result<Selected, RequestError> {
        let Sources {
            config,
            policy,
            env,
            env_accepted,
            legacy_image,
        } = *self;
        let ours: Vec<DeviceId> = cdi_names
            .iter()
            .filter(|q| q.is_kind(&policy.cdi_kind))
            .cloned()
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
}
