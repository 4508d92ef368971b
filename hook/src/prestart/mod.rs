//! `gpuhook prestart`: the OCI hook that gives a container the GPUs it asks for.
//!
//! It runs on every container start, as root, with input an image controls; so the design is:
//! - **cheap for everyone else**: a container that asks for nothing is recognised from its
//!   `config.json` alone ([`crate::request::is_gpu_container`]) and the hook exits before any
//!   discovery;
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

use std::io::Read;

use gpuhook_inject::cgroup::{locate_device_cgroup, DeviceCgroup, V1Devices, V2Devices};
use gpuhook_inject::{BundleConfig, DeviceController};
use gpuhook_node::bounded::{preview, preview_joined};
use gpuhook_node::DeviceRef;
use gpuhook_request::limits::MAX_NAMES_SHOWN;

pub use apply::{Applied, Target};
pub use error::PrestartError;
pub use inventory::InventorySource;
pub use plan::Plan;

use crate::config::Config;
use crate::logging::{Decision, Outcome};
use crate::request::{self, NotGpuReason, ParseOutcome};

const COMMAND: &str = "prestart";

/// What the hook did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrestartOutcome {
    /// Not a GPU container; nothing was touched.
    Skipped(NotGpuReason),
    Injected(Applied),
}

/// `1,3,2:0` (GPU indexes; `parent:mig` for MIG devices).
pub fn device_list(devices: &[DeviceRef]) -> String {
    devices
        .iter()
        .map(|d| match d {
            DeviceRef::Gpu { index } => index.to_string(),
            DeviceRef::Mig {
                parent_index,
                index,
            } => format!("{parent_index}:{index}"),
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn skip_reason(r: NotGpuReason) -> &'static str {
    match r {
        NotGpuReason::NoRequest => "no GPU requested",
        NotGpuReason::Void => "NVIDIA_VISIBLE_DEVICES contains void",
        NotGpuReason::EnvVarNotAccepted => {
            "NVIDIA_VISIBLE_DEVICES is ignored: the container is unprivileged and \
             accept-envvar-when-unprivileged = false (request GPUs with cdi.k8s.io annotations)"
        }
    }
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

fn run_for(
    state: &gpuhook_inject::OciState,
    config: &Config,
) -> Result<PrestartOutcome, PrestartError> {
    let container = state.id.as_str();
    let bundle = input::read_bundle_config(&state.bundle)?;
    let policy = config
        .request_policy()
        .for_container(&bundle.value, &state.bundle);
    if !request::is_gpu_container(&bundle.value, &policy) {
        // The fast path. Only a restrictive policy is worth explaining: a user whose
        // NVIDIA_VISIBLE_DEVICES was ignored needs to find out why in the log.
        if !policy.accept_envvar_when_unprivileged {
            if let Ok(ParseOutcome::NotGpu(r @ NotGpuReason::EnvVarNotAccepted)) =
                request::parse(&bundle.value, &policy)
            {
                log_skip(container, r);
                return Ok(PrestartOutcome::Skipped(r));
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
        return Ok(PrestartOutcome::Skipped(NotGpuReason::NoRequest));
    }
    let mps_names = request::mps_cdi_names(&bundle.value, &policy)?;
    let req = match request::parse(&bundle.value, &policy)? {
        ParseOutcome::NotGpu(r) if mps_names.is_empty() => {
            log_skip(container, r);
            return Ok(PrestartOutcome::Skipped(r));
        }
        // Only MPS shares: their CDI devices carry the GPU's own edits.
        ParseOutcome::NotGpu(_) => None,
        ParseOutcome::Gpu(req) => Some(req),
    };
    if let Some(req) = &req {
        tracing::info!(
            target: "gpuhook::decision",
            command = COMMAND,
            outcome = "requested",
            container,
            source = req.source.as_str(),
            devices = %preview(&format!("{:?}", req.devices)),
            capabilities = %caps_list(&req.capabilities),
            privileged = req.privileged,
            "decision"
        );
    }

    // Every name is resolved before the inventory is even read: an unknown share fails the
    // start before anything is injected.
    let foreign = if mps_names.is_empty() {
        cdi_devices::ForeignEdits::default()
    } else {
        let registry = gpuhook_cdi::Registry::load(&config.cdi_spec_dirs);
        for e in &registry.errors {
            tracing::warn!(container, spec = %e.path.display(), error = %e.message, "CDI spec skipped");
        }
        cdi_devices::foreign_edits(&registry, &mps_names)?
    };
    if !foreign.env_keys.is_empty() {
        tracing::warn!(
            target: "gpuhook::decision",
            command = COMMAND,
            outcome = "env-not-applied",
            container,
            cdi_devices = %preview_joined(&mps_names, MAX_NAMES_SHOWN, ","),
            env = %foreign.env_keys.join(","),
            reason = "an OCI hook cannot change the process env (fixed before hooks run); \
                      MPS clients are limited by the daemon's server-side limits instead",
            "decision"
        );
    }

    let (inv, inv_source) = inventory::load_inventory(config)?;
    let resolved = req.as_ref().map(|r| r.resolve(&inv)).transpose()?;
    // Log fields a container chooses are bounded (names listed, then counted).
    let mut devices = preview_joined(&mps_names, MAX_NAMES_SHOWN, ",");
    let mut caps = String::new();
    let mut source = request::RequestSource::CdiAnnotations.as_str();
    let mut edits = gpuhook_cdi::ContainerEdits::default();
    if let Some(resolved) = &resolved {
        for name in &resolved.foreign_cdi {
            if !name.is_kind(request::NVIDIA_GPU_MPS_KIND) {
                tracing::info!(container, cdi_device = %name, "ignoring a CDI device of another kind: the CDI-aware runtime injects it");
            }
        }
        for note in &resolved.requirements.unchecked {
            tracing::warn!(container, requirement = %note, "requirement could not be verified on this node");
        }
        let gpus = device_list(&resolved.devices);
        devices = [gpus, devices]
            .into_iter()
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join(",");
        caps = caps_list(&resolved.capabilities);
        source = resolved.source.as_str();
        let exe = std::env::current_exe().unwrap_or_else(|_| "/usr/bin/gpuhook".into());
        edits = gpuhook_cdi::edits_for(
            &inv,
            &resolved.devices,
            &resolved.capabilities,
            &gpuhook_cdi::EditOptions::new(exe),
        )?;
    }
    tracing::info!(
        target: "gpuhook::decision",
        command = COMMAND,
        outcome = "resolved",
        container,
        devices = %devices,
        capabilities = %caps,
        inventory = ?inv_source,
        "decision"
    );
    cdi_devices::merge(&mut edits, &foreign.edits);
    // Env is reported above; the plan takes nodes, mounts and hooks.
    edits.env.clear();
    let invalid = |r: String| PrestartError::invalid(container, r);
    let mut plan = Plan::from_edits(&inv, &edits).map_err(invalid)?;
    if let Some(resolved) = &resolved {
        plan.add_extras(&inv, resolved).map_err(invalid)?;
    }
    plan.check_host()
        .map_err(|(what, path, reason)| PrestartError::Host { what, path, reason })?;

    let bundle_cfg = BundleConfig::parse(&state.bundle, &bundle.bytes).map_err(|e| {
        PrestartError::BundleConfig {
            path: bundle.path.clone(),
            reason: e.to_string(),
        }
    })?;
    let pid = state.require_pid().map_err(|e| PrestartError::State {
        reason: e.to_string(),
    })?;
    let before = |source| PrestartError::Preflight {
        container: container.to_string(),
        source,
    };
    let cgroup = locate_device_cgroup(pid).map_err(before)?;
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
        // ldconfig writes the image's root-owned /etc/ld.so.cache: it runs as the container's
        // root (uid 0 without a single capability, pivoted into the rootfs), whatever user the process runs as
        // (libnvc does the same); as the process user it could not write the cache.
        uid: 0,
        gid: 0,
    };
    tracing::debug!(
        container,
        user = bundle_cfg.uid,
        "process user (ldconfig runs as uid 0 without capabilities)"
    );
    let applied = apply::apply(&target, &plan)?;
    let rules = plan.cgroup_rules();
    match &cgroup {
        DeviceCgroup::V1(dir) => {
            V1Devices::new(pid, dir.clone()).apply(&bundle_cfg.device_rules, &rules)
        }
        DeviceCgroup::V2(dir) => {
            V2Devices::new(pid, dir.clone()).apply(&bundle_cfg.device_rules, &rules)
        }
    }
    .map_err(|source| PrestartError::Inject {
        container: container.to_string(),
        step: "allowing the devices in the device cgroup",
        source,
    })?;

    let note = format!(
        "{} nodes, {} mounts, {} symlinks, ldcache {}, params override {}{}",
        applied.devices,
        applied.mounts,
        applied.symlinks,
        if applied.ldcache_updated {
            "updated"
        } else {
            "untouched"
        },
        if applied.params_overridden {
            "mounted"
        } else {
            "not needed (no driver params in the container's /proc)"
        },
        if applied.proc_files_absent.is_empty() {
            String::new()
        } else {
            format!(
                ", {} MIG /proc files absent from the container's procfs",
                applied.proc_files_absent.len()
            )
        }
    );
    let mut d = Decision::new(COMMAND, Outcome::Inject);
    d.container = Some(container);
    d.source = Some(source);
    d.devices = Some(&devices);
    d.capabilities = Some(&caps);
    d.reason = Some(&note);
    d.log();
    Ok(PrestartOutcome::Injected(applied))
}

fn log_skip(container: &str, r: NotGpuReason) {
    let mut d = Decision::new(COMMAND, Outcome::Skip);
    d.container = Some(container);
    d.reason = Some(skip_reason(r));
    d.log();
}

fn caps_list(caps: &std::collections::BTreeSet<gpuhook_node::Capability>) -> String {
    caps.iter()
        .map(|c| c.as_str())
        .collect::<Vec<_>>()
        .join(",")
}
