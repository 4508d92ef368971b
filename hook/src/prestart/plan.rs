//! What to do in one container, decided and validated before anything is touched.
//!
//! The CDI edits ([`gpuhook_cdi::edits_for`]) are the single description of "these devices with
//! these capabilities" shared with `gpuhook cdi generate` and the runtime wrapper. A prestart hook
//! cannot hand them to the runtime (the spec is already final), so this module turns them into
//! direct actions: device nodes to create, bind mounts, symlinks (the `create-symlinks` hook's
//! links), ldcache folders (the `update-ldcache` hook's folders) and the params override (the
//! `disable-device-node-modification` hook). Container paths are the driver paths, exactly as in
//! the CDI spec, so the two injection paths give a container the same view.
//!
//! Everything here is pure or reads the host only: [`Plan::from_edits`] checks every path and
//! option, [`Plan::check_host`] stats every host source (a stale inventory is caught here), and
//! only then does [`super::apply`] change the container.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use gpuhook_cdi::edits::{
    SetupHookArgs, CONTAINER_SPEC_FLAG, FOLDER_FLAG, LDCONFIG_FLAG, LINK_FLAG,
};
use gpuhook_cdi::ContainerEdits;
use gpuhook_inject::{normalize_container_path, DeviceRule, DeviceType, MountOptions};
use gpuhook_node::{DeviceRef, Inventory};

use super::error::PlanError;
use crate::request::ResolvedRequest;

/// Where the driver's parameters are, on the host (under the driver root) and in a container.
pub const PARAMS_PATH: &str = gpuhook_inject::hooks::PARAMS_PATH;

/// A character device to create in the container's `/dev`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DevicePlan {
    /// Container path (`/dev/nvidia0`).
    pub path: PathBuf,
    /// The host node it stands for (checked to carry the same number).
    pub host_path: PathBuf,
    pub major: u32,
    pub minor: u32,
    /// Permission bits, copied from the host node by [`Plan::check_host`] (0o666 until then).
    pub mode: u32,
}

/// A bind mount of a host path into the container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountPlan {
    pub host: PathBuf,
    /// Container path.
    pub container: PathBuf,
    pub options: MountOptions,
    /// A `/proc` file (MIG access files): mounted only when the container's procfs shows it,
    /// since nothing can be created in procfs.
    pub proc_file: bool,
}

/// Everything the hook will do to one container.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub devices: Vec<DevicePlan>,
    pub mounts: Vec<MountPlan>,
    /// `(target, link)`; link is a container path, target is stored verbatim.
    pub symlinks: Vec<(PathBuf, PathBuf)>,
    /// Container folders for the container's ld.so.cache; empty = no ldconfig run.
    pub ldcache_folders: Vec<PathBuf>,
    /// Host params file to copy with `ModifyDeviceFiles: 0` over the container's.
    pub params: Option<PathBuf>,
}

fn num(v: Option<i64>, what: &'static str, path: &str) -> Result<u32, PlanError> {
    v.and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| PlanError::DeviceNumber {
            path: path.to_string(),
            what,
            value: v,
        })
}

/// Parses CDI mount options into the flags we apply (bind/rbind/propagation are implied).
pub fn mount_options(options: &[String], dst: &str) -> Result<MountOptions, PlanError> {
    let mut o = MountOptions::default();
    for opt in options {
        match opt.as_str() {
            "ro" => o.read_only = true,
            "rw" => o.read_only = false,
            "nosuid" => o.nosuid = true,
            "nodev" => o.nodev = true,
            "noexec" => o.noexec = true,
            "bind" | "rbind" | "private" | "rprivate" | "slave" | "rslave" => {}
            other => {
                return Err(PlanError::MountOption {
                    path: dst.to_string(),
                    option: other.to_string(),
                })
            }
        }
    }
    // Driver files never need device nodes or setuid binaries; refuse an edit that would allow it.
    if !(o.nosuid && o.nodev) {
        return Err(PlanError::MountUnsafe {
            path: dst.to_string(),
            options: options.to_vec(),
        });
    }
    Ok(o)
}

fn container_path(p: &str) -> Result<PathBuf, PlanError> {
    Ok(normalize_container_path(Path::new(p))?)
}

impl Plan {
    /// Translates CDI edits into a plan; every container path is checked (absolute, no `..`).
    pub fn from_edits(inv: &Inventory, edits: &ContainerEdits) -> Result<Plan, PlanError> {
        let mut plan = Plan::default();
        for n in &edits.device_nodes {
            if n.device_type.as_deref().unwrap_or("c") != "c" {
                return Err(PlanError::NotCharDevice {
                    path: n.path.clone(),
                });
            }
            let path = container_path(&n.path)?;
            plan.devices.push(DevicePlan {
                host_path: PathBuf::from(n.host_path.as_deref().unwrap_or(&n.path)),
                major: num(n.major, "major", &n.path)?,
                minor: num(n.minor, "minor", &n.path)?,
                mode: 0o666,
                path,
            });
        }
        for m in &edits.mounts {
            if m.mount_type.as_deref().is_some_and(|t| t != "bind") {
                return Err(PlanError::NotBindMount {
                    path: m.container_path.clone(),
                });
            }
            plan.mounts.push(MountPlan {
                host: PathBuf::from(&m.host_path),
                container: container_path(&m.container_path)?,
                options: mount_options(&m.options, &m.container_path)?,
                proc_file: false,
            });
        }
        for h in &edits.hooks {
            plan.add_hook(inv, &h.args)?;
        }
        plan.dedup();
        Ok(plan)
    }

    /// Drops repeated identical actions (merged edits of several CDI kinds name the same GPU
    /// node, driver file or hook, possibly through different hook program paths).
    fn dedup(&mut self) {
        fn once<T: PartialEq>(v: &mut Vec<T>) {
            let mut kept: Vec<T> = Vec::with_capacity(v.len());
            for x in v.drain(..) {
                if !kept.contains(&x) {
                    kept.push(x);
                }
            }
            *v = kept;
        }
        once(&mut self.devices);
        once(&mut self.mounts);
        once(&mut self.symlinks);
        once(&mut self.ldcache_folders);
    }

    /// Turns one of our CDI hooks (`gpuhook hook <name> ...`) into actions.
    fn add_hook(&mut self, inv: &Inventory, args: &[String]) -> Result<(), PlanError> {
        let name = match args {
            [prog, hook, name, ..] if prog == gpuhook_cdi::GPUHOOK_PROGRAM && hook == "hook" => {
                name.as_str()
            }
            _ => {
                return Err(PlanError::UnsupportedHook {
                    args: args.to_vec(),
                })
            }
        };
        let rest = &args[3..];
        match name {
            // `setup` takes the flags of the three one-step hooks below, in any order.
            gpuhook_cdi::SETUP_HOOK => self.add_hook_flags(inv, name, rest, true)?,
            "create-symlinks" | "update-ldcache" => self.add_hook_flags(inv, name, rest, false)?,
            "disable-device-node-modification" if rest.is_empty() => {
                self.params = Some(inv.host_path(Path::new(PARAMS_PATH)));
            }
            other => {
                return Err(PlanError::UnsupportedHookName {
                    name: other.to_string(),
                })
            }
        }
        Ok(())
    }

    /// The flags of hook `name` ([`SetupHookArgs`], the generator's own encoding): `--link`,
    /// `--folder`, `--ldconfig-path` and, for `setup`, `--disable-device-node-modification`.
    /// The one-step hooks take only their own flags; what the prestart hook does not do (CUDA
    /// compat, application profile, another spec) is refused.
    fn add_hook_flags(
        &mut self,
        inv: &Inventory,
        name: &str,
        args: &[String],
        setup: bool,
    ) -> Result<(), PlanError> {
        let a = SetupHookArgs::from_args(args).map_err(|error| PlanError::HookArgs {
            hook: name.to_string(),
            error,
        })?;
        let links_ok = setup || name == "create-symlinks";
        let folders_ok = setup || name == "update-ldcache";
        let unexpected = [
            (!links_ok && !a.links.is_empty(), LINK_FLAG),
            (!folders_ok && !a.folders.is_empty(), FOLDER_FLAG),
            (!folders_ok && a.ldconfig.is_some(), LDCONFIG_FLAG),
            (
                !setup && a.disable_device_node_modification,
                gpuhook_cdi::DISABLE_DEVICE_NODE_MODIFICATION_FLAG,
            ),
            (
                a.cuda_compat_host_driver_version.is_some(),
                gpuhook_cdi::edits::CUDA_COMPAT_FLAG,
            ),
            (
                a.application_profile,
                gpuhook_cdi::edits::APPLICATION_PROFILE_FLAG,
            ),
            (a.container_spec.is_some(), CONTAINER_SPEC_FLAG),
            (
                !setup && !a.mps_shares.is_empty(),
                gpuhook_cdi::edits::MPS_SHARE_FLAG,
            ),
        ];
        if let Some((_, flag)) = unexpected.iter().find(|(bad, _)| *bad) {
            return Err(PlanError::UnexpectedFlag {
                hook: name.to_string(),
                flag,
            });
        }
        for l in a.links {
            let link = container_path(&l.link.to_string_lossy())?;
            self.symlinks.push((l.target, link));
        }
        for f in &a.folders {
            self.ldcache_folders
                .push(container_path(&f.to_string_lossy())?);
        }
        // `--mps-share`: the prestart hook checks the shares it injects before planning
        // (`mps_edits`: the same check, on the same pipe directories, from the registry).
        // The node's ldconfig comes from our config, not from the edits.
        if a.disable_device_node_modification {
            self.params = Some(inv.host_path(Path::new(PARAMS_PATH)));
        }
        Ok(())
    }

    fn add_device(&mut self, inv: &Inventory, path: String, major: u32, minor: u32) {
        if !self.devices.iter().any(|d| d.path == Path::new(&path)) {
            self.devices.push(DevicePlan {
                host_path: inv.host_dev_path(Path::new(&path)),
                path: PathBuf::from(path),
                major,
                minor,
                mode: 0o666,
            });
        }
    }

    fn add_proc_file(&mut self, inv: &Inventory, path: String) {
        self.mounts.push(MountPlan {
            host: inv.host_path(Path::new(&path)),
            container: PathBuf::from(path),
            options: MountOptions {
                read_only: true,
                nosuid: true,
                nodev: true,
                noexec: true,
            },
            proc_file: true,
        });
    }

    /// What the CDI edits do not cover: the MIG `access` files of the selected MIG devices, the
    /// MIG config/monitor capabilities (privileged containers only, checked by the request
    /// parser) and IMEX channels.
    pub fn add_extras(&mut self, inv: &Inventory, req: &ResolvedRequest) -> Result<(), PlanError> {
        for d in &req.devices {
            let DeviceRef::Mig {
                parent_index,
                index,
            } = *d
            else {
                continue;
            };
            let gpu = inv.gpu(parent_index).ok_or(PlanError::NoGpu {
                index: parent_index,
            })?;
            let mig =
                gpu.mig_devices
                    .iter()
                    .find(|m| m.index == index)
                    .ok_or(PlanError::NoMig {
                        parent: parent_index,
                        index,
                    })?;
            let gi = format!(
                "/proc/driver/nvidia/capabilities/gpu{}/mig/gi{}",
                gpu.minor, mig.gi_id
            );
            self.add_proc_file(inv, format!("{gi}/access"));
            self.add_proc_file(inv, format!("{gi}/ci{}/access", mig.ci_id));
        }
        for (wanted, name) in [(req.mig_config, "config"), (req.mig_monitor, "monitor")] {
            if wanted {
                self.add_proc_file(inv, format!("/proc/driver/nvidia/capabilities/mig/{name}"));
            }
        }
        let extras = super::extras::Extras {
            mig_config: req.mig_config,
            mig_monitor: req.mig_monitor,
            imex_channels: &req.imex_channels,
        };
        for n in super::extras::extra_nodes(inv, &extras)? {
            let number = |v: Option<i64>| u32::try_from(v.unwrap_or(0)).unwrap_or(0);
            self.add_device(inv, n.path, number(n.major), number(n.minor));
        }
        Ok(())
    }

    /// Stats every host source: device nodes must carry the inventory's numbers (their mode is
    /// copied), mount sources and the params file must exist. Returns `(what, path, reason)`.
    pub fn check_host(&mut self) -> Result<(), (&'static str, PathBuf, String)> {
        for d in &mut self.devices {
            let md = std::fs::metadata(&d.host_path)
                .map_err(|e| ("device node", d.host_path.clone(), e.to_string()))?;
            let (maj, min) = (libc::major(md.rdev()), libc::minor(md.rdev()));
            if !md.file_type().is_char_device() || (maj, min) != (d.major, d.minor) {
                return Err((
                    "device node",
                    d.host_path.clone(),
                    format!(
                        "is not character device {}:{} (found {}{maj}:{min})",
                        d.major,
                        d.minor,
                        if md.file_type().is_char_device() {
                            ""
                        } else {
                            "a non-device "
                        }
                    ),
                ));
            }
            d.mode = md.mode() & 0o777;
        }
        for m in self.mounts.iter().filter(|m| !m.proc_file) {
            std::fs::symlink_metadata(&m.host)
                .map_err(|e| ("driver file", m.host.clone(), e.to_string()))?;
        }
        if let Some(p) = &self.params {
            if !p.is_file() {
                // No params file (driver root without /proc): nothing to override.
                self.params = None;
            }
        }
        Ok(())
    }

    /// The device cgroup rules: exactly the nodes we create, read/write, no mknod
    /// (CVE-2021-1056).
    pub fn cgroup_rules(&self) -> Vec<DeviceRule> {
        self.devices
            .iter()
            .map(|d| DeviceRule {
                allow: true,
                kind: DeviceType::Char,
                major: Some(d.major),
                minor: Some(d.minor),
                access: gpuhook_inject::cgroup::Access(
                    gpuhook_inject::cgroup::Access::READ | gpuhook_inject::cgroup::Access::WRITE,
                ),
            })
            .collect()
    }
}

/// IMEX channel ids present under the dev root (`NVIDIA_IMEX_CHANNELS=all`).
#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
