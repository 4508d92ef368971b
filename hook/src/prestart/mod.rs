//! `gpuhook prestart`: the OCI hook that gives a container the GPUs it asks for.
//!
//! It runs on every container start, as root, with input an image controls; so the design is:
//! - **cheap for everyone else**: a container that asks for nothing is recognised from its
//!   `config.json` alone ([`crate::request::is_gpu_container`]) and the hook exits before any
//!   discovery;
//! - **read once**: `config.json` is parsed once ([`input`]); the request is read from it once
//!   ([`ContainerRequest::read`]) and the bundle fields from the same value
//!   ([`BundleConfig::from_value`]); every step below takes those values;
//! - **no NVML on the hot path**: the inventory comes from the cache `gpuhook cdi generate` wrote,
//!   re-discovered only when missing or stale ([`inventory`]);
//! - **one description of the edits**: [`gpuhook_cdi::edits_for`], shared with the CDI generator
//!   and the runtime wrapper, turned into actions by [`plan`] — container paths are the driver
//!   paths, as in the CDI spec (no per-distro library folder), and the ldcache folders are the
//!   `update-ldcache` hook's folders, so they always match the mounts;
//! - **validate, then act**: the request, the inventory, every path and every host source are
//!   checked, then the container root is checked ([`apply`]'s preflight); only then is anything
//!   created or mounted, so bad input never leaves a half-injected container;
//! - **exact device cgroup**: exactly the nodes created, `rw`, no `m`.
//!
//! Every decision is one structured log line ([`crate::logging::Decision`]); nothing goes to
//! stdout.

pub mod apply;
pub mod cdi_devices;
pub mod error;
pub mod extras;
pub mod input;
pub mod inventory;
pub mod plan;
mod report;

use std::io::Read;

use gpuhook_cdi::ContainerEdits;
use gpuhook_inject::cgroup::{locate_device_cgroup, DeviceCgroup, V1Devices, V2Devices};
use gpuhook_inject::{BundleConfig, DeviceController, OciState};
use gpuhook_node::bounded::{preview, preview_joined};
use gpuhook_node::Inventory;
use gpuhook_request::limits::MAX_NAMES_SHOWN;
use gpuhook_request::{ContainerRequest, RequestPolicy, ResolvedRequest};
use serde_json::Value;

pub use apply::{Applied, Target};
pub use error::PrestartError;
pub use inventory::InventorySource;
pub use plan::Plan;
pub use report::device_list;

use crate::config::Config;
use crate::logging::{Decision, Outcome};
use crate::request::{self, NotGpuReason, ParseOutcome};
use report::{caps_list, log_injected, log_skip, Summary};

const COMMAND: &str = "prestart";

/// What the hook did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrestartOutcome {
    /// Not a GPU container; nothing was touched.
    Skipped(NotGpuReason),
    Injected(Applied),
}

/// Runs the hook: the OCI state is read from `stdin`.
pub fn run(stdin: impl Read, config: &Config) -> Result<PrestartOutcome, PrestartError> {
    config.log_warnings();
    let state = input::read_state(stdin)?;
    let container = state.id.as_str();
    let result = run_for(&state, config);
    if let Err(e) = &result {
        let reason = e.to_string();
        let mut d = Decision::new(COMMAND, Outcome::Refuse);
        d.container = Some(container);
        d.reason = Some(&reason);
        d.log();
    }
    result
}

/// The hook for one container: its request, the edits, the plan, then the injection.
fn run_for(state: &OciState, config: &Config) -> Result<PrestartOutcome, PrestartError> {
    let container = state.id.as_str();
    let bundle = input::read_bundle_config(&state.bundle)?;
    let policy = config
        .request_policy()
        .for_container(&bundle.value, &state.bundle);
    let req = match read_request(container, &bundle.value, &policy)? {
        Ok(req) => req,
        Err(reason) => return Ok(PrestartOutcome::Skipped(reason)),
    };
    let mps_names = req.mps_names();
    // Every name is resolved before the inventory is even read: an unknown share fails the
    // start before anything is injected.
    let foreign = mps_edits(container, config, &bundle.value, &mps_names)?;
    let (inv, inv_source) = inventory::load_inventory(config)?;
    let resolved = req.gpu().map(|r| r.resolve(&inv)).transpose()?;
    let (mut edits, summary) = gpu_edits(container, &inv, resolved.as_ref(), &mps_names)?;
    tracing::info!(
        target: "gpuhook::decision",
        command = COMMAND,
        outcome = "resolved",
        container,
        devices = %summary.devices,
        capabilities = %summary.caps,
        inventory = ?inv_source,
        "decision"
    );
    cdi_devices::merge(&mut edits, &foreign.edits);
    // Env is reported by `mps_edits`; the plan takes nodes, mounts and hooks.
    edits.env.clear();
    let plan = validated_plan(container, &inv, &edits, resolved.as_ref())?;
    let applied = inject(state, config, &bundle, &plan)?;
    log_injected(container, &summary, &applied);
    Ok(PrestartOutcome::Injected(applied))
}

/// The container's request, read once; `Err(reason)`: not a GPU container (logged).
fn read_request(
    container: &str,
    config: &Value,
    policy: &RequestPolicy,
) -> Result<Result<ContainerRequest, NotGpuReason>, PrestartError> {
    if !request::is_gpu_container(config, policy) {
        return Ok(Err(fast_skip(container, config, policy)));
    }
    let req = ContainerRequest::read(config, policy)?;
    match &req.gpu {
        ParseOutcome::NotGpu(r) if req.mps_names().is_empty() => {
            log_skip(container, *r);
            return Ok(Err(*r));
        }
        // Only MPS shares: their CDI devices carry the GPU's own edits.
        ParseOutcome::NotGpu(_) => {}
        ParseOutcome::Gpu(gpu) => tracing::info!(
            target: "gpuhook::decision",
            command = COMMAND,
            outcome = "requested",
            container,
            source = gpu.source.as_str(),
            devices = %preview(&format!("{:?}", gpu.devices)),
            capabilities = %caps_list(&gpu.capabilities),
            privileged = req.privileged,
            "decision"
        ),
    }
    Ok(Ok(req))
}

/// The fast path for a container the pre-check found nothing in. Only a restrictive policy is
/// worth explaining: a user whose NVIDIA_VISIBLE_DEVICES was ignored needs to find out why.
fn fast_skip(container: &str, config: &Value, policy: &RequestPolicy) -> NotGpuReason {
    if !policy.accept_envvar_when_unprivileged {
        if let Ok(ParseOutcome::NotGpu(r @ NotGpuReason::EnvVarNotAccepted)) =
            request::parse(config, policy)
        {
            log_skip(container, r);
            return r;
        }
    }
    // Debug level: one line per non-GPU container would flood the log at info.
    tracing::debug!(
        target: "gpuhook::decision",
        command = COMMAND,
        outcome = "skip",
        container,
        reason = "not a GPU container (nothing requested, or void)",
        "decision"
    );
    NotGpuReason::NoRequest
}

/// The edits of the MPS shares `names` asks for, from the CDI spec directories, once the
/// container's user is known to be served by their daemons ([`gpuhook_request::check_mps_access`]).
fn mps_edits(
    container: &str,
    config: &Config,
    oci: &Value,
    names: &[String],
) -> Result<cdi_devices::ForeignEdits, PrestartError> {
    if names.is_empty() {
        return Ok(cdi_devices::ForeignEdits::default());
    }
    let registry = gpuhook_cdi::Registry::load(&config.cdi_spec_dirs);
    for e in &registry.errors {
        tracing::warn!(container, spec = %e.path.display(), error = %e.message, "CDI spec skipped");
    }
    let foreign = cdi_devices::foreign_edits(&registry, names)?;
    let shares = gpuhook_request::mps_shares(&registry, names);
    gpuhook_request::check_mps_access(&shares, &gpuhook_request::ProcessUser::of(oci)).map_err(
        |error| PrestartError::Mps {
            container: container.to_string(),
            error,
        },
    )?;
    if !foreign.env_keys.is_empty() {
        tracing::warn!(
            target: "gpuhook::decision",
            command = COMMAND,
            outcome = "env-not-applied",
            container,
            cdi_devices = %preview_joined(names, MAX_NAMES_SHOWN, ","),
            env = %foreign.env_keys.join(","),
            reason = "an OCI hook cannot change the process env (fixed before hooks run); \
                      MPS clients are limited by the daemon's server-side limits instead",
            "decision"
        );
    }
    Ok(foreign)
}

/// The edits of the resolved GPUs (none for a container of MPS shares only), and what the
/// decision lines say about them (log fields a container chooses are bounded).
fn gpu_edits(
    container: &str,
    inv: &Inventory,
    resolved: Option<&ResolvedRequest>,
    mps_names: &[String],
) -> Result<(ContainerEdits, Summary), PrestartError> {
    let mut summary = Summary {
        devices: preview_joined(mps_names, MAX_NAMES_SHOWN, ","),
        caps: String::new(),
        source: request::RequestSource::CdiAnnotations.as_str(),
    };
    let Some(resolved) = resolved else {
        return Ok((ContainerEdits::default(), summary));
    };
    for name in &resolved.foreign_cdi {
        if !name.is_kind(request::NVIDIA_GPU_MPS_KIND) {
            tracing::info!(container, cdi_device = %name, "ignoring a CDI device of another kind: the CDI-aware runtime injects it");
        }
    }
    for note in &resolved.requirements.unchecked {
        tracing::warn!(container, requirement = %note, "requirement could not be verified on this node");
    }
    let gpus = device_list(&resolved.devices);
    summary.devices = [gpus, summary.devices]
        .into_iter()
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join(",");
    summary.caps = caps_list(&resolved.capabilities);
    summary.source = resolved.source.as_str();
    let exe = std::env::current_exe().unwrap_or_else(|_| "/usr/bin/gpuhook".into());
    let edits = gpuhook_cdi::edits_for(
        inv,
        &resolved.devices,
        &resolved.capabilities,
        &gpuhook_cdi::EditOptions::new(exe),
    )?;
    Ok((edits, summary))
}

/// The plan of `edits` (plus the extras the request asks for), checked against the host.
fn validated_plan(
    container: &str,
    inv: &Inventory,
    edits: &ContainerEdits,
    resolved: Option<&ResolvedRequest>,
) -> Result<Plan, PrestartError> {
    let invalid = |error| PrestartError::Plan {
        container: container.to_string(),
        error,
    };
    let mut plan = Plan::from_edits(inv, edits).map_err(invalid)?;
    if let Some(resolved) = resolved {
        plan.add_extras(inv, resolved).map_err(invalid)?;
    }
    plan.check_host()
        .map_err(|(what, path, reason)| PrestartError::Host { what, path, reason })?;
    Ok(plan)
}

/// Checks the container (its bundle fields, pid and device cgroup), then applies the plan and
/// allows exactly the nodes it made in the device cgroup.
fn inject(
    state: &OciState,
    config: &Config,
    bundle: &input::BundleJson,
    plan: &Plan,
) -> Result<Applied, PrestartError> {
    let container = state.id.as_str();
    let bundle_cfg = BundleConfig::from_value(&state.bundle, &bundle.value).map_err(|e| {
        PrestartError::BundleConfig {
            path: bundle.path.clone(),
            reason: e.to_string(),
        }
    })?;
    let pid = state.require_pid().map_err(|e| PrestartError::State {
        reason: e.to_string(),
    })?;
    let cgroup = locate_device_cgroup(pid).map_err(|error| PrestartError::Preflight {
        container: container.to_string(),
        error,
    })?;
    tracing::debug!(
        container,
        devices = plan.devices.len(),
        mounts = plan.mounts.len(),
        "plan validated"
    );
    let ldconfig = config.ldconfig_path(|p| p.exists());
    let target = Target {
        container,
        pid,
        rootfs: &bundle_cfg.rootfs,
        ldconfig: &ldconfig,
        // The process user: gpuhook acts with its rights on a root-owned volume. ldconfig still
        // runs as the owner of the image's /etc (uid 0 without a single capability), whatever
        // user the process runs as (libnvc does the same); as the process user it could not
        // write the image's root-owned /etc/ld.so.cache.
        uid: bundle_cfg.uid,
        gid: bundle_cfg.gid,
    };
    let applied = apply::apply(&target, plan)?;
    let rules = plan.cgroup_rules();
    match &cgroup {
        DeviceCgroup::V1(dir) => {
            V1Devices::new(pid, dir.clone()).apply(&bundle_cfg.device_rules, &rules)
        }
        DeviceCgroup::V2(dir) => {
            V2Devices::new(pid, dir.clone()).apply(&bundle_cfg.device_rules, &rules)
        }
    }
    .map_err(|error| PrestartError::Inject {
        container: container.to_string(),
        step: "allowing the devices in the device cgroup",
        error,
    })?;
    Ok(applied)
}
