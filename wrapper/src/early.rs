//! `early-setup`: the wrapper does the work of our own `gpuhook hook setup` createContainer hook
//! (SONAME links, the container's `ld.so.cache`) before `runc create`, and drops the hook.
//!
//! Why: the hook is a process runc forks from inside the container's init and waits for, and its
//! ldconfig is on the critical path of every GPU container start. Done here, the links are made
//! and ldconfig starts before runc does, and runc creates the container while ldconfig runs
//! (`gpuhook_inject::start_early_setup`; the wrapper core waits for both, see
//! `crate::takeover`).
//!
//! The hook's effect must stay exactly the same, so the wrapper only takes it over when it can
//! see everything the hook would see:
//! - the spec has exactly one such hook (path = the gpuhook our specs name, `hook setup`, args
//!   our parser accepts) and no other prestart/createRuntime/createContainer hook (which could
//!   change the root before ours);
//! - the container gets a new mount namespace and no user namespace (with one, the files the
//!   hook makes would be owned by the container's root, not the host's);
//! - ldconfig sees the image plus the spec's bind mounts, mounted in spec order in a private
//!   namespace; bind mounts under a non-bind mount of the spec (`/dev`, `/proc`, a tmpfs) are
//!   left out, as they are not in the container's root there.
//!
//! `--disable-device-node-modification` needs the container's `/proc`, which only exists inside
//! `runc create`: when the host has NVIDIA's params (the kernel module is loaded) a hook doing
//! only that stays; without them the hook would do nothing and is dropped. Any failure to start
//! the work leaves the spec as it was: the hook then runs as before.

use std::path::{Path, PathBuf};

use gpuhook_inject::InjectError;

use crate::error::NodeError;
use crate::takeover::{EarlyWork, HookTakeover};
use gpuhook_cdi::edits::SetupHookArgs;
use gpuhook_inject::{EarlyBind, EarlySetup, LdcacheOptions, PendingSetup};
use serde_json::Value;

use super::node::NodeState;
use gpuhook::config::Config;

/// Why the `gpuhook hook setup` hook stays a hook (runc runs it) instead of being taken over.
#[derive(Debug, thiserror::Error)]
enum KeepHook {
    #[error("{0} hooks run before the container, not just one createContainer hook")]
    OtherHooks(usize),
    #[error("the createContainer hook is not our `hook setup`")]
    NotOurs,
    #[error("the hook names its own --container-spec")]
    OwnSpec,
    #[error("the container gets no new mount namespace")]
    NoMountNamespace,
    #[error("the container has a user namespace")]
    UserNamespace,
    #[error("no root.path")]
    NoRoot,
    #[error("bad process.user")]
    BadUser,
    /// The hook's MPS check fails: the hook stays and refuses the start with the message.
    #[error("an MPS share of the hook: {0}")]
    Mps(#[from] gpuhook_request::MpsAccessError),
    #[error("a mount without destination")]
    NoDestination,
    #[error("a bind mount without an absolute source")]
    NoSource,
    #[error(transparent)]
    Node(#[from] NodeError),
    #[error(transparent)]
    Path(#[from] InjectError),
}

/// The hook phases that run before (or as part of) ours and could change the root.
const EARLIER_HOOKS: &[&str] = &["prestart", "createRuntime", "createContainer"];

/// The wrapper's [`HookTakeover`].
#[derive(Debug)]
pub struct EarlySetupTakeover<'a> {
    config: &'a Config,
    /// Knows the gpuhook binary our specs' hooks run.
    node: &'a NodeState<'a>,
    /// NVIDIA's params as the container's procfs will show them (`/proc/driver/nvidia/params`).
    host_params: PathBuf,
}

#[derive(Debug)]
struct Running(PendingSetup);

impl EarlyWork for Running {
    fn wait(self: Box<Self>) -> Result<(), InjectError> {
        let rootfs = self.0.rootfs().to_path_buf();
        self.0.wait()?;
        tracing::info!(rootfs = %rootfs.display(), "hook setup done by the wrapper");
        Ok(())
    }
}

impl<'a> EarlySetupTakeover<'a> {
    pub fn new(config: &'a Config, node: &'a NodeState<'a>) -> Self {
        EarlySetupTakeover {
            config,
            node,
            host_params: PathBuf::from(gpuhook_inject::hooks::PARAMS_PATH),
        }
    }

    /// Reads the params from `path` instead of `/proc/driver/nvidia/params` (tests).
    pub fn with_host_params(mut self, path: PathBuf) -> Self {
        self.host_params = path;
        self
    }

    /// Whether `hook` is our `hook setup`; its arguments when it is (and they parse).
    fn our_setup(&self, hook: &Value, gpuhook: &Path) -> Option<SetupHookArgs> {
        let path = hook.get("path")?.as_str()?;
        let args: Vec<&str> = hook
            .get("args")?
            .as_array()?
            .iter()
            .map(Value::as_str)
            .collect::<Option<_>>()?;
        if Path::new(path) != gpuhook || args.get(1..3)? != ["hook", "setup"] {
            return None;
        }
        SetupHookArgs::from_args(&args[3..]).ok()
    }

    /// The plan, or why the hook must stay.
    fn plan(&self, bundle: &Path, spec: &Value) -> Result<(EarlySetup, SetupHookArgs), KeepHook> {
        let hooks = spec.get("hooks").and_then(Value::as_object);
        let earlier: Vec<(&str, &Value)> = EARLIER_HOOKS
            .iter()
            .filter_map(|phase| Some((*phase, hooks?.get(*phase)?.as_array()?)))
            .flat_map(|(phase, list)| list.iter().map(move |h| (phase, h)))
            .collect();
        let [("createContainer", hook)] = earlier[..] else {
            return Err(KeepHook::OtherHooks(earlier.len()));
        };
        let gpuhook = self.node.edit_options()?.gpuhook_path;
        let setup = self.our_setup(hook, &gpuhook).ok_or(KeepHook::NotOurs)?;
        if setup.container_spec.is_some() {
            return Err(KeepHook::OwnSpec);
        }
        // The hook's `--mps-share` check, here instead (the same function): taken over only
        // when it passes; otherwise the hook runs and refuses the start itself.
        let shares: Vec<gpuhook_request::MpsShare> = setup
            .mps_shares
            .iter()
            .map(gpuhook_request::MpsShare::from)
            .collect();
        gpuhook_request::check_mps_access(&shares, &gpuhook_request::ProcessUser::of(spec))?;
        check_namespaces(spec)?;
        let root = spec
            .pointer("/root/path")
            .and_then(Value::as_str)
            .ok_or(KeepHook::NoRoot)?;
        let uid = spec.pointer("/process/user/uid").and_then(Value::as_u64);
        let gid = spec.pointer("/process/user/gid").and_then(Value::as_u64);
        let id = |v: Option<u64>| u32::try_from(v.unwrap_or(0)).map_err(|_| KeepHook::BadUser);
        let ldconfig = match &setup.ldconfig {
            Some(p) => p.clone(),
            None => self.config.ldconfig_path(Path::exists),
        };
        let plan = EarlySetup {
            rootfs: bundle.join(root),
            binds: binds(spec)?,
            links: setup
                .links
                .iter()
                .map(|l| (l.target.clone(), l.link.clone()))
                .collect(),
            folders: setup.folders.clone(),
            ldconfig,
            ldcache: LdcacheOptions::new(id(uid)?, id(gid)?),
        };
        Ok((plan, setup))
    }

    /// `spec`'s hooks without ours, plus a params-only `hook setup` when it is needed.
    fn rewrite_hooks(&self, spec: &mut Value, setup: &SetupHookArgs) {
        let Some(list) = spec
            .pointer_mut("/hooks/createContainer")
            .and_then(Value::as_array_mut)
        else {
            return;
        };
        let keep_params = setup.disable_device_node_modification && self.host_params.exists();
        if let (true, Some(hook)) = (keep_params, list.first_mut()) {
            let params_only = SetupHookArgs {
                disable_device_node_modification: true,
                ..SetupHookArgs::default()
            };
            let mut args = vec![
                gpuhook_cdi::GPUHOOK_PROGRAM.to_string(),
                "hook".into(),
                gpuhook_cdi::SETUP_HOOK.into(),
            ];
            args.extend(params_only.to_args());
            hook["args"] = serde_json::json!(args);
            return;
        }
        list.clear();
        let no_hooks_left = spec
            .get_mut("hooks")
            .and_then(Value::as_object_mut)
            .is_some_and(|hooks| {
                hooks.remove("createContainer");
                hooks.is_empty()
            });
        if let (true, Some(spec)) = (no_hooks_left, spec.as_object_mut()) {
            spec.remove("hooks");
        }
    }
}

/// A new mount namespace of its own, and no user namespace (see the module docs).
fn check_namespaces(spec: &Value) -> Result<(), KeepHook> {
    // (type, joins an existing one)
    let namespaces: Vec<(&str, bool)> = spec
        .pointer("/linux/namespaces")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|ns| Some((ns.get("type")?.as_str()?, ns.get("path").is_some())))
        .collect();
    if !namespaces.contains(&("mount", false)) {
        return Err(KeepHook::NoMountNamespace);
    }
    if namespaces.iter().any(|(t, _)| *t == "user") {
        return Err(KeepHook::UserNamespace);
    }
    Ok(())
}

/// The spec's bind mounts ldconfig must see (see the module docs).
fn binds(spec: &Value) -> Result<Vec<EarlyBind>, KeepHook> {
    let mounts: Vec<&Value> = spec
        .get("mounts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .collect();
    let options = |m: &Value| -> Vec<String> {
        m.get("options")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|o| o.as_str().map(str::to_string))
            .collect()
    };
    let is_bind = |m: &Value| {
        m.get("type").and_then(Value::as_str) == Some("bind")
            || options(m).iter().any(|o| o == "bind" || o == "rbind")
    };
    let destination = |m: &Value| -> Result<PathBuf, KeepHook> {
        let d = m
            .get("destination")
            .and_then(Value::as_str)
            .ok_or(KeepHook::NoDestination)?;
        Ok(gpuhook_inject::normalize_container_path(Path::new(d))?)
    };
    let mut others = Vec::new();
    for m in mounts.iter().filter(|m| !is_bind(m)) {
        others.push(destination(m)?);
    }
    let mut out = Vec::new();
    for m in mounts.iter().filter(|m| is_bind(m)) {
        let dst = destination(m)?;
        if others.iter().any(|o| dst.starts_with(o)) {
            continue;
        }
        let source = m
            .get("source")
            .and_then(Value::as_str)
            .map(PathBuf::from)
            .filter(|s| s.is_absolute())
            .ok_or(KeepHook::NoSource)?;
        out.push(EarlyBind {
            source,
            destination: dst,
            read_only: options(m).iter().any(|o| o == "ro"),
        });
    }
    Ok(out)
}

impl HookTakeover for EarlySetupTakeover<'_> {
    fn take_over(
        &self,
        bundle: &Path,
        container: Option<&str>,
        spec: &mut Value,
    ) -> Option<Box<dyn EarlyWork>> {
        if !self.config.runtime.early_setup {
            early_decision(
                container,
                false,
                "early-setup = false in [runtime] of the config",
            );
            return None;
        }
        let (mut plan, setup) = match self.plan(bundle, spec) {
            Ok(p) => p,
            Err(why) => {
                early_decision(container, false, &why.to_string());
                return None;
            }
        };
        // The steps that write into the image: CUDA compat before the early ldconfig reads its
        // linker config, the application profile from the nodes runc will create.
        match gpuhook::cli::app_profile::early_steps(&plan.rootfs, &setup, spec) {
            Ok(Some(compat)) if !plan.folders.is_empty() => plan.folders.insert(0, compat),
            Ok(_) => {}
            Err(e) => {
                early_decision(container, false, &e.to_string());
                return None;
            }
        }
        match gpuhook_inject::start_early_setup(plan) {
            Ok(pending) => {
                self.rewrite_hooks(spec, &setup);
                early_decision(container, true, "done beside runc create, same steps");
                Some(Box::new(Running(pending)))
            }
            Err(e) => {
                early_decision(container, false, &e.to_string());
                None
            }
        }
    }
}

/// Whether the wrapper took over the `gpuhook hook setup` hook, and why (or why not): one
/// `gpuhook::decision` line at info, so operators see it at the default level.
fn early_decision(container: Option<&str>, taken: bool, reason: &str) {
    let early_setup = if taken { "taken-over" } else { "stays-a-hook" };
    tracing::info!(
        target: "gpuhook::decision",
        command = "runtime create",
        container,
        early_setup,
        reason,
        "decision"
    );
}

#[cfg(test)]
#[path = "early_tests.rs"]
mod tests;
