//! Carrying out a [`Plan`] in a container that runc is creating.
//!
//! A prestart (or createRuntime) hook runs in the host's namespaces after runc has built the
//! container's mount namespace and before it pivots into the rootfs. Everything happens on one
//! thread inside that namespace ([`gpuhook_inject::in_mount_namespace_of`]), through a
//! [`ContainerRoot`] opened there: every container path is resolved with openat2
//! `RESOLVE_IN_ROOT`, so a symlink planted by the image is followed *inside* the rootfs.
//!
//! Order: open the root, check every destination (preflight: nothing is changed when one is wrong,
//! so a bad image never leaves a half-injected container), then device nodes, driver mounts, the
//! `/proc` files that exist, symlinks, the params override, and last the host's ldconfig
//! (sandboxed) so it sees the mounted libraries.

use std::path::{Path, PathBuf};

use gpuhook_inject::hooks::{create_symlinks_in, disable_device_node_modification};
use gpuhook_inject::{
    in_mount_namespace_of, update_ldcache, CharDeviceSpec, ContainerRoot, DeviceSource, EntryKind,
    InjectError,
};

use super::error::PrestartError;
use super::plan::{Plan, PARAMS_PATH};

/// Where and as whom to inject.
#[derive(Debug, Clone)]
pub struct Target<'a> {
    pub container: &'a str,
    /// The container's init (state.pid): its mount namespace is entered.
    pub pid: i32,
    /// Host path of the rootfs (as seen in the container's mount namespace before pivot_root).
    pub rootfs: &'a Path,
    /// The host's ldconfig.
    pub ldconfig: &'a Path,
    pub uid: u32,
    pub gid: u32,
}

/// What was done (for the decision log).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Applied {
    pub devices: usize,
    pub mounts: usize,
    /// `/proc` files the container's procfs does not show (no driver behind it): not mounted.
    pub proc_files_absent: Vec<PathBuf>,
    pub symlinks: usize,
    pub params_overridden: bool,
    pub ldcache_updated: bool,
}

/// Enters the container's mount namespace and applies `plan` there.
pub fn apply(target: &Target<'_>, plan: &Plan) -> Result<Applied, PrestartError> {
    // The injection thread logs through the caller's subscriber (it may be a scoped one).
    let dispatch = tracing::dispatcher::get_default(|d| d.clone());
    in_mount_namespace_of(target.pid, || {
        tracing::dispatcher::with_default(&dispatch, || apply_in_namespace(target, plan))
    })
    .map_err(|source| PrestartError::Preflight {
        container: target.container.to_string(),
        source,
    })?
}

fn apply_in_namespace(t: &Target<'_>, plan: &Plan) -> Result<Applied, PrestartError> {
    let pre = |source| PrestartError::Preflight {
        container: t.container.to_string(),
        source,
    };
    let root = ContainerRoot::open(t.rootfs).map_err(pre)?;
    let present = preflight(&root, plan).map_err(pre)?;

    let step = |step: &'static str| {
        move |source| PrestartError::Inject {
            container: t.container.to_string(),
            step,
            source,
        }
    };
    let mut done = Applied::default();
    for d in &plan.devices {
        let spec = CharDeviceSpec {
            major: d.major,
            minor: d.minor,
            mode: d.mode,
            uid: 0,
            gid: 0,
        };
        root.make_char_device(&d.path, spec, &DeviceSource::Mknod)
            .map_err(step("creating device nodes"))?;
        done.devices += 1;
    }
    for (m, present) in plan.mounts.iter().zip(&present.proc_files) {
        if !present {
            done.proc_files_absent.push(m.container.clone());
            continue;
        }
        root.bind_mount(&m.host, &m.container, m.options)
            .map_err(step("bind-mounting driver files"))?;
        done.mounts += 1;
    }
    done.symlinks = create_symlinks_in(&root, &plan.symlinks)
        .map_err(step("creating symlinks"))?
        .len();
    if let (Some(host), true) = (&plan.params, present.params) {
        done.params_overridden = disable_device_node_modification(t.rootfs, host)
            .map_err(step("overriding /proc/driver/nvidia/params"))?;
    }
    if !plan.ldcache_folders.is_empty() {
        update_ldcache(t.rootfs, &plan.ldcache_folders, t.ldconfig, t.uid, t.gid)
            .map_err(step("updating the container's ld.so.cache"))?;
        done.ldcache_updated = true;
    }
    Ok(done)
}

/// Which optional destinations exist.
struct Present {
    /// Per mount of the plan: mount it (always true for driver files).
    proc_files: Vec<bool>,
    params: bool,
}

fn refused(path: &Path, reason: String) -> InjectError {
    InjectError::Refused {
        path: path.to_path_buf(),
        reason,
    }
}

/// Checks every destination in the root without changing anything.
fn preflight(root: &ContainerRoot, plan: &Plan) -> Result<Present, InjectError> {
    for d in &plan.devices {
        match root.lstat(&d.path)? {
            None => {}
            Some(EntryKind::CharDevice { major, minor }) if (major, minor) == (d.major, d.minor) => {
            }
            Some(other) => {
                return Err(refused(
                    &d.path,
                    format!(
                        "the image has {} there, not char {}:{}; remove it from the image",
                        other.describe(),
                        d.major,
                        d.minor
                    ),
                ))
            }
        }
    }
    let mut proc_files = Vec::with_capacity(plan.mounts.len());
    for m in &plan.mounts {
        let found = root.lstat(&m.container)?;
        if m.proc_file {
            proc_files.push(found == Some(EntryKind::File));
            continue;
        }
        let src_dir = std::fs::metadata(&m.host).is_ok_and(|md| md.is_dir());
        match found {
            None => {}
            Some(EntryKind::Directory) if src_dir => {}
            Some(EntryKind::File | EntryKind::Other) if !src_dir => {}
            Some(other) => {
                return Err(refused(
                    &m.container,
                    format!(
                        "the image has {} there; will not mount {} over it",
                        other.describe(),
                        m.host.display()
                    ),
                ))
            }
        }
        proc_files.push(true);
    }
    for (_, link) in &plan.symlinks {
        match root.lstat(link)? {
            None | Some(EntryKind::Symlink(_)) => {}
            Some(other) => {
                return Err(refused(
                    link,
                    format!(
                        "the image has {} there; will not replace it with a symlink",
                        other.describe()
                    ),
                ))
            }
        }
    }
    let params = plan.params.is_some()
        && root.lstat(Path::new(PARAMS_PATH))? == Some(EntryKind::File);
    Ok(Present { proc_files, params })
}
