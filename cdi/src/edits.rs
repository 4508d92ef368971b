//! Container edits for a selection of devices and driver capabilities.
//!
//! One place decides which nodes, mounts, env and hooks a GPU container gets, so the CDI generator
//! (`all` device + common edits), the prestart hook and the runtime wrapper (`jit` edits) can never
//! disagree. Everything is taken from the [`Inventory`]: device numbers are written into the
//! nodes so a runtime need not stat the host, and host paths are computed from the driver/dev
//! roots so a driver container (`/run/nvidia/driver`) works like a host install.
//!
//! The hook runs the gpuhook binary itself as one `createContainer` hook (`gpuhook hook setup`),
//! with an explicit minimal `env` (a hook without one inherits the container's env:
//! CVE-2025-23266).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use gpuhook_node::{Capability, DeviceRef, Inventory};

pub use crate::nodes::NODE_PERMISSIONS;

pub(crate) use crate::nodes::path_str;
use crate::nodes::{control_nodes, device_nodes};
use crate::spec::{ContainerEdits, Hook, Mount};
use crate::CdiError;

#[path = "edits_setup.rs"]
mod setup;
pub use setup::{
    SetupArgsError, SetupHookArgs, SetupLink, SetupLinkError, SetupMpsShare, CONTAINER_SPEC_FLAG,
    FOLDER_FLAG, LDCONFIG_FLAG, LINK_FLAG, MPS_SHARE_FLAG,
};

/// `args[0]` of every hook we generate.
pub const GPUHOOK_PROGRAM: &str = "gpuhook";
/// The whole environment of every hook we generate.
pub const DEFAULT_HOOK_ENV: &[&str] = &["PATH=/usr/sbin:/usr/bin:/sbin:/bin"];
/// Mount options of driver files (libraries, binaries, firmware, config files).
pub const RO_MOUNT_OPTIONS: &[&str] = &["ro", "nosuid", "nodev", "rbind", "rprivate"];
/// Mount options of IPC sockets and the MPS pipe dir (writable).
pub const IPC_MOUNT_OPTIONS: &[&str] = &["nosuid", "nodev", "noexec", "rbind", "rprivate"];
/// The subcommand of `gpuhook hook` our specs run (see [`edits_for`]'s hooks).
pub const SETUP_HOOK: &str = "setup";
/// The `setup` flag that mounts the `params` override.
pub const DISABLE_DEVICE_NODE_MODIFICATION_FLAG: &str = "--disable-device-node-modification";
/// Env that stops a leftover legacy hook from acting a second time.
pub const VISIBLE_DEVICES_VOID: &str = "NVIDIA_VISIBLE_DEVICES=void";

/// How hooks are written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EditOptions {
    /// Absolute host path of the gpuhook binary run by the hooks.
    pub gpuhook_path: PathBuf,
    /// Passed to `update-ldcache` as `--ldconfig-path` when set.
    pub ldconfig_path: Option<PathBuf>,
    /// The hooks' environment; [`DEFAULT_HOOK_ENV`] by default. Never empty.
    pub hook_env: Vec<String>,
    /// Steps of the setup hook left out, by NVIDIA's hook names (`nvidia-ctk cdi generate
    /// --disable-hook`): `create-symlinks`, `update-ldcache`, `disable-device-node-modification`,
    /// `enable-cuda-compat`; `all` leaves out the hook.
    pub disabled_hooks: BTreeSet<String>,
    /// Add the setup hook's CUDA forward-compat step (`--cuda-compat-host-driver-version`,
    /// NVIDIA's `enable-cuda-compat`) for the inventory's driver version.
    pub cuda_compat: bool,
    /// Add the setup hook's application-profile step (NVIDIA's `update-application-profile`).
    pub application_profile: bool,
}

/// The setup flag of the CUDA forward-compat step.
pub const CUDA_COMPAT_FLAG: &str = "--cuda-compat-host-driver-version";
/// The setup flag of the application-profile step.
pub const APPLICATION_PROFILE_FLAG: &str = "--application-profile";

/// NVIDIA's hook names that map to a step of our setup hook (nvidia-container-toolkit v1.20.0
/// internal/discover/hooks.go), and `all`.
pub const HOOK_NAMES: &[&str] = &[
    "create-symlinks",
    "update-ldcache",
    "disable-device-node-modification",
    "enable-cuda-compat",
    "update-application-profile",
    "chmod",
    "all",
];

impl EditOptions {
    pub fn new(gpuhook_path: impl Into<PathBuf>) -> Self {
        EditOptions {
            gpuhook_path: gpuhook_path.into(),
            ldconfig_path: None,
            hook_env: DEFAULT_HOOK_ENV.iter().map(|s| s.to_string()).collect(),
            disabled_hooks: BTreeSet::new(),
            cuda_compat: false,
            application_profile: false,
        }
    }

    fn enabled(&self, hook: &str) -> bool {
        !self.disabled_hooks.contains(hook) && !self.disabled_hooks.contains("all")
    }

    fn check(&self) -> Result<(), CdiError> {
        if !self.gpuhook_path.is_absolute() {
            return Err(CdiError::InvalidOption {
                option: "gpuhook path",
                message: format!(
                    "{} is not absolute; hooks need the absolute host path of the gpuhook binary",
                    self.gpuhook_path.display()
                ),
            });
        }
        if let Some(p) = self.ldconfig_path.as_ref().filter(|p| !p.is_absolute()) {
            return Err(CdiError::InvalidOption {
                option: "ldconfig path",
                message: format!("{} is not absolute", p.display()),
            });
        }
        if self.hook_env.is_empty() || self.hook_env.iter().any(|e| !e.contains('=')) {
            return Err(CdiError::InvalidOption {
                option: "hook env",
                message: "hooks need a non-empty env of KEY=VALUE entries (an empty env would inherit the container's)".into(),
            });
        }
        Ok(())
    }
}

fn mounts(inv: &Inventory, caps: &BTreeSet<Capability>) -> Result<Vec<Mount>, CdiError> {
    let f = &inv.files;
    let ro: Vec<&Path> = f
        .libraries
        .iter()
        .filter(|l| caps.contains(&l.capability))
        .map(|l| l.path.as_path())
        .chain(
            f.binaries
                .iter()
                .filter(|b| caps.contains(&b.capability))
                .map(|b| b.path.as_path()),
        )
        .chain(
            f.firmware
                .iter()
                .filter(|_| !caps.is_empty())
                .map(PathBuf::as_path),
        )
        .chain(
            f.config_files
                .iter()
                .filter(|c| caps.contains(&c.capability))
                .map(|c| c.path.as_path()),
        )
        .collect();
    let ipc = f
        .ipc
        .iter()
        .filter(|i| caps.contains(&i.capability))
        .map(|i| i.path.as_path());
    // Keyed by container path: sorted output, one mount per destination (IPC wins over nothing:
    // the same path is never both).
    let mut by_dest: BTreeMap<String, Mount> = BTreeMap::new();
    let options = |o: &[&str]| o.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    for (path, opts) in ro
        .into_iter()
        .map(|p| (p, RO_MOUNT_OPTIONS))
        .chain(ipc.map(|p| (p, IPC_MOUNT_OPTIONS)))
    {
        let container_path = path_str(path)?;
        by_dest.entry(container_path.clone()).or_insert(Mount {
            host_path: path_str(&inv.host_path(path))?,
            container_path,
            options: options(opts),
            mount_type: None,
        });
    }
    Ok(by_dest.into_values().collect())
}

fn hook(opts: &EditOptions, args: Vec<String>) -> Result<Hook, CdiError> {
    let mut argv = vec![GPUHOOK_PROGRAM.to_string(), "hook".to_string()];
    argv.extend(args);
    Ok(Hook {
        hook_name: "createContainer".into(),
        path: path_str(&opts.gpuhook_path)?,
        args: argv,
        env: opts.hook_env.clone(),
        timeout: None,
    })
}

/// Adds the start check of MPS `share` to `edits`: `--mps-share` on their `gpuhook hook setup`
/// hook (written with `opts`), or a setup hook of its own when they have none. The share's
/// spec (gpu-mps-daemon's) so carries the check to runtimes that apply CDI themselves.
pub fn add_mps_share(
    edits: &mut ContainerEdits,
    opts: &EditOptions,
    share: SetupMpsShare,
) -> Result<(), CdiError> {
    opts.check()?;
    let program = path_str(&opts.gpuhook_path)?;
    let ours = edits.hooks.iter_mut().find(|h| {
        h.hook_name == "createContainer"
            && h.path == program
            && h.args.get(1..3) == Some(&["hook".to_string(), SETUP_HOOK.to_string()][..])
    });
    let bad_args = |e: SetupArgsError| CdiError::InvalidOption {
        option: "setup hook",
        message: e.to_string(),
    };
    match ours {
        Some(h) => {
            let mut setup = SetupHookArgs::from_args(&h.args[3..]).map_err(bad_args)?;
            setup.mps_shares.push(share);
            h.args.truncate(3);
            h.args.extend(setup.to_args());
        }
        None => {
            let setup = SetupHookArgs {
                mps_shares: vec![share],
                ..SetupHookArgs::default()
            };
            let mut args = vec![SETUP_HOOK.to_string()];
            args.extend(setup.to_args());
            edits.hooks.push(hook(opts, args)?);
        }
    }
    Ok(())
}

/// The one `gpuhook hook setup` createContainer hook: the SONAME links, the `params` override and
/// the `ld.so.cache` update in one process. Each hook is a process the runtime starts (and waits
/// for) on every container start, so one hook instead of three saves two of them. The older
/// one-step hooks (`create-symlinks`, `update-ldcache`, `disable-device-node-modification`) stay
/// supported for specs written before.
fn hooks(
    inv: &Inventory,
    caps: &BTreeSet<Capability>,
    opts: &EditOptions,
) -> Result<Vec<Hook>, CdiError> {
    if !opts.enabled("all") {
        return Ok(Vec::new());
    }
    let mut setup = SetupHookArgs::default();
    let links: BTreeSet<(String, String)> = inv
        .files
        .symlinks
        .iter()
        .filter(|s| caps.contains(&s.capability) && opts.enabled("create-symlinks"))
        .map(|s| Ok((path_str(&s.link)?, path_str(&s.target)?)))
        .collect::<Result<_, CdiError>>()?;
    for (link, target) in links {
        setup.links.push(SetupLink {
            target: target.into(),
            link: link.into(),
        });
    }
    let parents: BTreeSet<&Path> = inv
        .files
        .libraries
        .iter()
        .filter(|l| caps.contains(&l.capability))
        .filter_map(|l| l.path.parent())
        .collect();
    // Discovery's folder order first (it mirrors ld.so.conf), then any folder it did not list.
    let mut folders: Vec<&Path> = inv
        .files
        .library_dirs
        .iter()
        .map(PathBuf::as_path)
        .filter(|d| parents.contains(d))
        .collect();
    for p in &parents {
        if !folders.contains(p) {
            folders.push(p);
        }
    }
    if !folders.is_empty() && opts.enabled("update-ldcache") {
        if let Some(ldconfig) = &opts.ldconfig_path {
            setup.ldconfig = Some(path_str(ldconfig)?.into());
        }
        for f in folders {
            setup.folders.push(path_str(f)?.into());
        }
    }
    setup.disable_device_node_modification = opts.enabled("disable-device-node-modification");
    if opts.cuda_compat && opts.enabled("enable-cuda-compat") && !inv.driver_version.is_empty() {
        setup.cuda_compat_host_driver_version = Some(inv.driver_version.clone());
    }
    setup.application_profile =
        opts.application_profile && opts.enabled("update-application-profile");
    if setup.is_empty() {
        return Ok(Vec::new());
    }
    let mut args = vec![SETUP_HOOK.to_string()];
    args.extend(setup.to_args());
    Ok(vec![hook(opts, args)?])
}

fn common(
    inv: &Inventory,
    caps: &BTreeSet<Capability>,
    any_device: bool,
    opts: &EditOptions,
) -> Result<ContainerEdits, CdiError> {
    opts.check()?;
    if caps.is_empty() && !any_device {
        return Ok(ContainerEdits::default());
    }
    Ok(ContainerEdits {
        env: vec![VISIBLE_DEVICES_VOID.into()],
        device_nodes: control_nodes(inv, caps)?,
        mounts: mounts(inv, caps)?,
        hooks: hooks(inv, caps, opts)?,
        ..Default::default()
    })
}

/// The edits every GPU container with capabilities `caps` needs, whatever its devices: control
/// nodes, mounts of the capabilities' files (firmware for any capability), env and hooks. Empty
/// when `caps` is empty. Capabilities are taken literally (`video` does not imply `compute`:
/// callers expand them first).
pub fn common_edits(
    inv: &Inventory,
    caps: &BTreeSet<Capability>,
    opts: &EditOptions,
) -> Result<ContainerEdits, CdiError> {
    common(inv, caps, false, opts)
}

/// Everything a container with `devices` and capabilities `caps` needs: the devices' nodes, then
/// the [`common_edits`] (with `nvidiactl`, env and the device-node hook even when `caps` is
/// empty, as long as a device is selected).
pub fn edits_for(
    inv: &Inventory,
    devices: &[DeviceRef],
    caps: &BTreeSet<Capability>,
    opts: &EditOptions,
) -> Result<ContainerEdits, CdiError> {
    let mut edits = ContainerEdits {
        device_nodes: device_nodes(inv, devices)?,
        ..Default::default()
    };
    edits.append(common(inv, caps, !devices.is_empty(), opts)?);
    Ok(edits)
}

#[cfg(test)]
#[path = "edits_tests.rs"]
mod tests;
