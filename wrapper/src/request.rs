//! What the wrapper injects into a container, from its (untrusted) OCI spec.
//!
//! The container's request is read once ([`ContainerRequest::read`]) from the spec the core
//! parsed, and every step below takes that value.
//!
//! - Not a GPU container ([`gpuhook_request::is_gpu_container`] false and no admitted
//!   `cdi.k8s.io/*` annotation, [`gpuhook_request::has_cdi_request`]): nothing, decided from
//!   `config.json` alone without discovery.
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

use gpuhook::config::{Config, RuntimeMode, CONFIG_ENV};
use gpuhook::logging::{Decision, Outcome};
use gpuhook::prestart::extras::{extra_nodes, Extras};
use gpuhook_cdi::{ContainerEdits, DeviceNode, Hook};
use gpuhook_node::bounded::preview_joined;
use gpuhook_request::limits::MAX_NAMES_SHOWN;
use gpuhook_request::{
    has_cdi_request, is_gpu_container, resolve_selection, ContainerRequest, GpuRequest,
    NotGpuReason, ParseOutcome, RequestPolicy, RequestSource,
};
use serde_json::Value;

use crate::error::{InjectionError, NodeError};
use crate::node::NodeState;
use crate::run::{DeviceRequest, Injection};

const COMMAND: &str = "runtime create";

/// The wrapper's [`DeviceRequest`].
#[derive(Debug)]
pub struct WrapperRequest<'a> {
    config: &'a Config,
    policy: RequestPolicy,
    node: &'a NodeState<'a>,
}

/// What to inject, and the request source for the decision line; `None`: why not.
type Decided = Result<(Option<Injection>, String), InjectionError>;

impl<'a> WrapperRequest<'a> {
    pub fn new(config: &'a Config, node: &'a NodeState<'a>) -> Self {
        WrapperRequest {
            config,
            policy: config.request_policy(),
            node,
        }
    }

    /// Checks `NVIDIA_REQUIRE_*` against the inventory (loaded only when there are constraints).
    fn check_requirements(&self, req: &GpuRequest) -> Result<(), InjectionError> {
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

    /// The CDI names: the request's ids as names of our kind, then every annotation name.
    fn cdi_names(
        &self,
        req: &GpuRequest,
        container: &ContainerRequest,
    ) -> Result<Vec<String>, InjectionError> {
        let mut names: Vec<String> = if req.source == RequestSource::CdiAnnotations {
            Vec::new()
        } else {
            req.devices.to_cdi_names(&req.cdi_kind, req.source)?
        };
        for q in &container.cdi_names {
            let n = q.to_string();
            if !names.contains(&n) {
                names.push(n);
            }
        }
        Ok(names)
    }

    fn legacy_hook(&self) -> Result<ContainerEdits, InjectionError> {
        let opts = self.node.edit_options()?;
        let path = opts
            .gpuhook_path
            .to_str()
            .ok_or(NodeError::NotUtf8 {
                what: "the gpuhook path",
            })?
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
    fn extra_nodes(&self, req: &GpuRequest) -> Result<Vec<DeviceNode>, InjectionError> {
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

    /// `cdi` mode: the CDI names, with the extra nodes beside them; no names (`none`): the
    /// common edits of our kind's spec.
    fn cdi_injection(
        &self,
        req: &GpuRequest,
        container: &ContainerRequest,
    ) -> Result<Injection, InjectionError> {
        let names = self.cdi_names(req, container)?;
        let extra = self.extra_nodes(req)?;
        Ok(match (names.is_empty(), extra.is_empty()) {
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
        })
    }

    /// `jit-cdi` mode: the edits for exactly the resolved devices and capabilities.
    fn jit_injection(&self, req: &GpuRequest) -> Result<Injection, InjectionError> {
        let inv = self.node.inventory()?;
        let resolved = req.resolve(inv)?;
        let mut edits = gpuhook_cdi::edits_for(
            inv,
            &resolved.devices,
            &resolved.capabilities,
            &self.node.edit_options()?,
        )?;
        edits.device_nodes.extend(self.extra_nodes(req)?);
        Ok(Injection::Edits(Box::new(edits)))
    }

    fn decide(&self, spec: &Value, policy: &RequestPolicy) -> Decided {
        if !is_gpu_container(spec, policy) && !has_cdi_request(spec, policy) {
            return Ok((None, why_not_gpu(spec, policy).into()));
        }
        let container = ContainerRequest::read(spec, policy)?;
        let req = match &container.gpu {
            ParseOutcome::Gpu(r) => r,
            ParseOutcome::NotGpu(reason) if container.cdi_names.is_empty() => {
                return Ok((None, not_gpu_reason(*reason).into()))
            }
            // Only other vendors' CDI devices.
            ParseOutcome::NotGpu(_) => {
                let names = container
                    .cdi_names
                    .iter()
                    .map(ToString::to_string)
                    .collect();
                return Ok((Some(Injection::Cdi(names)), "cdi-annotations".into()));
            }
        };
        self.check_requirements(req)?;
        let injection = match self.config.runtime.mode {
            RuntimeMode::Cdi => self.cdi_injection(req, &container)?,
            RuntimeMode::JitCdi => self.jit_injection(req)?,
            RuntimeMode::Legacy => Injection::Edits(Box::new(self.legacy_hook()?)),
        };
        Ok((Some(injection), req.source.as_str().to_string()))
    }
}

/// Why the cheap pre-check found no GPU request: only a container that set
/// NVIDIA_VISIBLE_DEVICES is read, to tell "ignored by the policy" from "not asked".
fn why_not_gpu(spec: &Value, policy: &RequestPolicy) -> &'static str {
    let env = spec.pointer("/process/env").and_then(Value::as_array);
    let sets_visible = env.into_iter().flatten().any(|e| {
        e.as_str()
            .is_some_and(|e| e.starts_with("NVIDIA_VISIBLE_DEVICES="))
    });
    match sets_visible.then(|| ContainerRequest::read(spec, policy)) {
        Some(Ok(ContainerRequest {
            gpu: ParseOutcome::NotGpu(reason),
            ..
        })) => not_gpu_reason(reason),
        _ => "no GPU requested",
    }
}

/// Why a container gets no GPU, for the decision line.
fn not_gpu_reason(reason: NotGpuReason) -> &'static str {
    match reason {
        NotGpuReason::NoRequest => "no GPU requested",
        NotGpuReason::Void => "the device list is `void`",
        NotGpuReason::EnvVarNotAccepted => {
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
    ) -> Result<Option<Injection>, InjectionError> {
        // runc's container id; a spec's hostname only when argv had none.
        let hostname = container.or_else(|| spec.get("hostname").and_then(Value::as_str));
        let mut policy = self.policy.for_container(spec, bundle);
        let dir = &self.config.runtime.claim_index_dir;
        let spec = crate::claim_index::with_claims(dir, spec, &mut policy);
        match self.decide(&spec, &policy) {
            Ok((None, reason)) => {
                let mut d = Decision::new(COMMAND, Outcome::Skip);
                d.container = hostname;
                d.reason = Some(&reason);
                d.log();
                Ok(None)
            }
            Ok((Some(injection), source)) => {
                let devices = match injection.cdi_names() {
                    Some(names) => preview_joined(names, MAX_NAMES_SHOWN, ","),
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
