//! What the wrapper injects into a container, from its (untrusted) OCI spec.
//!
//! - Not a GPU container ([`gpuhook_request::is_gpu_container`] false and no `cdi.k8s.io/*`
//!   annotation): nothing, decided from `config.json` alone without discovery.
//! - `cdi` mode: CDI names. `cdi.k8s.io/*` annotations (container annotations; a pod's own only
//!   for allow-listed devices, see [`gpuhook_request::provenance`]) give fully qualified names,
//!   used as they are, *of any kind* (containerd 1.6 has no CDI: the wrapper is the only CDI consumer, as the
//!   CRI plugin would be on 1.7+). Ids from `NVIDIA_VISIBLE_DEVICES` (or the volume-mount list)
//!   become `nvidia.com/gpu=<id>`; a fully qualified name there is kept as it is.
//!   `NVIDIA_VISIBLE_DEVICES=none` asks for the driver without a GPU: the common edits of the
//!   spec (driver files, control nodes, hooks), with no device node.
//!   CDI specs hold every driver file whatever `NVIDIA_DRIVER_CAPABILITIES` says (so does
//!   NVIDIA's cdi mode): in this mode capabilities select nothing.
//! - `jit-cdi` mode: the edits for exactly the resolved devices and capabilities, in memory.
//! - `legacy` mode: the `gpuhook prestart` hook.
//!
//! In cdi and jit-cdi modes the MIG config/monitor and IMEX channel nodes are added beside the
//! devices ([`gpuhook::prestart::extras`]); the feature gates NVIDIA_GDS, ... are refused by the
//! request parser in every mode.
//!
//! `NVIDIA_REQUIRE_*` constraints are checked against the node's inventory in every mode, when
//! there are any (only then is the inventory loaded); a failure fails `create` with the message.

use std::path::Path;

use crate::{BoxError, DeviceRequest, Injection};
use gpuhook_cdi::{ContainerEdits, DeviceNode, Hook};
use serde_json::Value;

use super::node::NodeState;
use gpuhook::config::{Config, RuntimeMode, CONFIG_ENV};
use gpuhook::logging::{Decision, Outcome};
use gpuhook::prestart::extras::{extra_nodes, Extras};
use gpuhook_request::{
    self, resolve_selection, ContainerRequest, ParseOutcome, QualifiedName, RequestPolicy,
    RequestSource,
};

const COMMAND: &str = "runtime create";

/// The wrapper's [`DeviceRequest`].
#[derive(Debug)]
pub struct WrapperRequest<'a> {
    config: &'a Config,
    policy: RequestPolicy,
    node: &'a NodeState<'a>,
}

/// Every name of every `cdi.k8s.io/*` annotation the policy admits (a pod annotation only when
/// allow-listed, see [`gpuhook_request::provenance`]), by annotation key, validated, each once.
pub fn annotation_names(
    spec: &Value,
    policy: &RequestPolicy,
) -> Result<Vec<QualifiedName>, BoxError> {
    let mut out: Vec<QualifiedName> = Vec::new();
    for q in gpuhook_request::annotation_names(spec, policy)? {
        if !out.contains(&q) {
            out.push(q);
        }
    }
    Ok(out)
}

impl<'a> WrapperRequest<'a> {
    pub fn new(config: &'a Config, node: &'a NodeState<'a>) -> Self {
        WrapperRequest {
            config,
            policy: config.request_policy(),
            node,
        }
    }

    /// Checks `NVIDIA_REQUIRE_*` against the inventory (loaded only when there are constraints).
    fn check_requirements(&self, req: &ContainerRequest) -> Result<(), BoxError> {
        if req.requirements.disabled || req.requirements.constraints.is_empty() {
            return Ok(());
        }
        let inv = self.node.inventory()?;
        // Devices that do not resolve are reported by the CDI resolution (same wording as
        // every CDI runtime); the requirements are then checked node-wide only.
        let devices = resolve_selection(&req.devices, inv, req.source, &req.cdi_kind)
            .map(|r| r.devices)
            .unwrap_or_default();
        let report = req.requirements.check(inv, &devices)?;
        for u in &report.unchecked {
            tracing::warn!(requirement = %u, "requirement not verifiable on this node; allowed");
        }
        Ok(())
    }

    fn cdi_names(
        &self,
        req: &ContainerRequest,
        annotations: &[QualifiedName],
    ) -> Result<Vec<String>, BoxError> {
        let mut names: Vec<String> = if req.source == RequestSource::CdiAnnotations {
            Vec::new()
        } else {
            req.devices.to_cdi_names(&req.cdi_kind, req.source)?
        };
        for q in annotations {
            let n = q.to_string();
            if !names.contains(&n) {
                names.push(n);
            }
        }
        Ok(names)
    }

    fn legacy_hook(&self) -> Result<ContainerEdits, BoxError> {
        let opts = self.node.edit_options()?;
        let path = opts
            .gpuhook_path
            .to_str()
            .ok_or("the gpuhook path is not UTF-8")?
            .to_string();
        let mut env = opts.hook_env;
        if !env.iter().any(|e| e.starts_with(&format!("{CONFIG_ENV}="))) {
            env.push(format!(
                "{CONFIG_ENV}={}",
                gpuhook::config::DEFAULT_CONFIG_PATH
            ));
        }
        Ok(ContainerEdits {
            hooks: vec![Hook {
                hook_name: "prestart".into(),
                path,
                args: vec!["gpuhook".into(), "prestart".into()],
                env,
                timeout: None,
            }],
            ..Default::default()
        })
    }

    /// The MIG config/monitor and IMEX channel nodes the request asks for (no spec has them);
    /// the inventory is loaded only when it asks for any.
    fn extra_nodes(&self, req: &ContainerRequest) -> Result<Vec<DeviceNode>, BoxError> {
        let extras = Extras {
            mig_config: req.mig_config,
            mig_monitor: req.mig_monitor,
            imex_channels: &req.imex_channels,
        };
        if !extras.any() {
            return Ok(Vec::new());
        }
        Ok(extra_nodes(self.node.inventory()?, &extras)?)
    }

    fn decide(
        &self,
        spec: &Value,
        policy: &RequestPolicy,
    ) -> Result<(Option<Injection>, String), BoxError> {
        let annotations = annotation_names(spec, policy)?;
        if !gpuhook_request::is_gpu_container(spec, policy) && annotations.is_empty() {
            return Ok((None, why_not_gpu(spec, policy).into()));
        }
        let req = match gpuhook_request::parse(spec, policy)? {
            ParseOutcome::Gpu(r) => r,
            ParseOutcome::NotGpu(reason) if annotations.is_empty() => {
                return Ok((None, not_gpu_reason(reason).into()))
            }
            // Only other vendors' CDI devices.
            ParseOutcome::NotGpu(_) => {
                let names = annotations.iter().map(ToString::to_string).collect();
                return Ok((Some(Injection::Cdi(names)), "cdi-annotations".into()));
            }
        };
        self.check_requirements(&req)?;
        let source = req.source.as_str().to_string();
        let injection = match self.config.runtime.mode {
            RuntimeMode::Cdi => {
                let names = self.cdi_names(&req, &annotations)?;
                let extra = self.extra_nodes(&req)?;
                match (names.is_empty(), extra.is_empty()) {
                    (true, _) => {
                        let mut edits = self.node.common_edits()?;
                        edits.device_nodes.extend(extra);
                        Injection::Edits(Box::new(edits))
                    }
                    (false, true) => Injection::Cdi(names),
                    (false, false) => Injection::CdiWithEdits(
                        names,
                        Box::new(ContainerEdits {
                            device_nodes: extra,
                            ..Default::default()
                        }),
                    ),
                }
            }
            RuntimeMode::JitCdi => {
                let inv = self.node.inventory()?;
                let resolved = req.resolve(inv)?;
                let mut edits = gpuhook_cdi::edits_for(
                    inv,
                    &resolved.devices,
                    &resolved.capabilities,
                    &self.node.edit_options()?,
                )?;
                edits.device_nodes.extend(self.extra_nodes(&req)?);
                Injection::Edits(Box::new(edits))
            }
            RuntimeMode::Legacy => Injection::Edits(Box::new(self.legacy_hook()?)),
        };
        Ok((Some(injection), source))
    }
}

/// Why the cheap pre-check found no GPU request: only a container that set
/// NVIDIA_VISIBLE_DEVICES is parsed, to tell "ignored by the policy" from "not asked".
fn why_not_gpu(spec: &Value, policy: &RequestPolicy) -> &'static str {
    let env = spec.pointer("/process/env").and_then(Value::as_array);
    let sets_visible = env.into_iter().flatten().any(|e| {
        e.as_str()
            .is_some_and(|e| e.starts_with("NVIDIA_VISIBLE_DEVICES="))
    });
    match sets_visible.then(|| gpuhook_request::parse(spec, policy)) {
        Some(Ok(ParseOutcome::NotGpu(reason))) => not_gpu_reason(reason),
        _ => "no GPU requested",
    }
}

/// Why a container gets no GPU, for the decision line.
fn not_gpu_reason(reason: gpuhook_request::NotGpuReason) -> &'static str {
    match reason {
        gpuhook_request::NotGpuReason::NoRequest => "no GPU requested",
        gpuhook_request::NotGpuReason::Void => "the device list is `void`",
        gpuhook_request::NotGpuReason::EnvVarNotAccepted => {
            "NVIDIA_VISIBLE_DEVICES of an unprivileged container ignored \
             (accept-nvidia-visible-devices-envvar-when-unprivileged = false)"
        }
    }
}

impl DeviceRequest for WrapperRequest<'_> {
    fn injection(
        &self,
        bundle: &Path,
        container: Option<&str>,
        spec: &Value,
    ) -> Result<Option<Injection>, BoxError> {
        // runc's container id; a spec's hostname only when argv had none.
        let hostname = container.or_else(|| spec.get("hostname").and_then(Value::as_str));
        let policy = self.policy.for_container(spec, bundle);
        match self.decide(spec, &policy) {
            Ok((None, reason)) => {
                let mut d = Decision::new(COMMAND, Outcome::Skip);
                d.container = hostname;
                d.reason = Some(&reason);
                d.log();
                Ok(None)
            }
            Ok((Some(injection), source)) => {
                let devices = match injection.cdi_names() {
                    Some(names) => {
                        gpuhook_node::bounded::preview_joined(names, crate::MAX_NAMES_SHOWN, ",")
                    }
                    None => format!("{:?} edits", self.config.runtime.mode),
                };
                let mut d = Decision::new(COMMAND, Outcome::Inject);
                d.container = hostname;
                d.source = Some(&source);
                d.devices = Some(&devices);
                d.log();
                Ok(Some(injection))
            }
            Err(e) => {
                let reason = e.to_string();
                let mut d = Decision::new(COMMAND, Outcome::Refuse);
                d.container = hostname;
                d.reason = Some(&reason);
                d.log();
                Err(e)
            }
        }
    }
}
