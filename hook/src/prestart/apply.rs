//! Carrying out a [`Plan`] in a container that runc is creating.
//!
//! A prestart (or createRuntime) hook runs in the host's namespaces after runc has built the
//! container's mount namespace and before it pivots into the rootfs. Everything happens on one
//! thread inside that namespace ([`gpuhook_inject::in_mount_namespace_of`]), through a
//! [`ContainerRoot`] opened there: every container path is resolved with openat2
//! `RESOLVE_IN_ROOT`, so a symlink planted by the image is followed *inside* the rootfs.
//!
//! Order: open the root, check every destination (preflight: nothing is changed when one is wrong,
//! so a bad image never leaves a half-injected container), then the libraries of the ldcache
//! folders and the symlinks, which is all the host's ldconfig reads; ldconfig then starts
//! (sandboxed, in its own copy of the mount namespace) while the other driver mounts, the `/proc`
//! files that exist, the device nodes and the params override are made, and the hook waits for
//! it last. An error on the way kills ldconfig.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use gpuhook_inject::hooks::{create_symlinks_in, disable_device_node_modification};
use gpuhook_inject::{
    in_mount_namespace_of, start_ldcache_update, CharDeviceSpec, ContainerRoot, DeviceSource,
    EntryKind, InjectError, LdcacheOptions,
};

use super::error::PrestartError;
use super::plan::{MountPlan, Plan, PARAMS_PATH};

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
    /// The container process's user (`process.user`): on a root-owned volume (not the root
    /// filesystem) gpuhook acts with its rights, never as root (gpuhook-inject's `owner` rule).
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
    .map_err(|error| PrestartError::Preflight {
        container: target.container.to_string(),
        error,
    })?
}

/// Whether the namespace this thread entered is the one the process started in (the host's): a
/// "container" without its own mount namespace, or a pid that is not what the state claims.
/// Checked on the namespace actually entered, so nothing can change between check and use.
fn in_host_mount_namespace() -> std::io::Result<bool> {
    use std::os::unix::fs::MetadataExt;
    let host = std::fs::metadata("/proc/self/ns/mnt")?;
    let here = std::fs::metadata("/proc/thread-self/ns/mnt")?;
    Ok((host.dev(), host.ino()) == (here.dev(), here.ino()))
}

/// Refuses a pid in the hook's own (host) mount namespace: mounts would land on the host.
fn check_own_mount_namespace(t: &Target<'_>) -> Result<(), PrestartError> {
    match in_host_mount_namespace() {
        Ok(false) => Ok(()),
        Ok(true) => Err(PrestartError::invalid(
            t.container,
            format!(
                "process {} shares the hook's own (host) mount namespace: mounts would land \
                     on the host; run gpuhook prestart as a hook of a container with a mount \
                     namespace",
                t.pid
            ),
        )),
        Err(e) => Err(PrestartError::invalid(
            t.container,
            format!("cannot compare mount namespaces: {e}"),
        )),
    }
}

/// The plan's device nodes, made by mknod in the container root; how many.
fn make_device_nodes(root: &ContainerRoot, plan: &Plan) -> Result<usize, InjectError> {
    for d in &plan.devices {
        let spec = CharDeviceSpec {
            major: d.major,
            minor: d.minor,
            mode: d.mode,
            uid: 0,
            gid: 0,
        };
        root.make_char_device(&d.path, spec, &DeviceSource::Mknod)?;
    }
    Ok(plan.devices.len())
}

fn apply_in_namespace(t: &Target<'_>, plan: &Plan) -> Result<Applied, PrestartError> {
    let pre = |error| PrestartError::Preflight {
        container: t.container.to_string(),
        error,
    };
    check_own_mount_namespace(t)?;
    let root = ContainerRoot::open_as(t.rootfs, t.uid, t.gid).map_err(pre)?;
    let present = preflight(&root, plan).map_err(pre)?;
    tracing::debug!(container = t.container, "preflight passed");

    let step = |step: &'static str| {
        move |error| PrestartError::Inject {
            container: t.container.to_string(),
            step,
            error,
        }
    };
    let mut done = Applied::default();
    // ldconfig runs in parallel with the nodes and the other mounts: first what it reads (the
    // libraries in the ldcache folders and the links), then it starts in its own copy of the
    // mount namespace, then the rest, then we wait for it.
    let (for_ldconfig, rest): (Vec<_>, Vec<_>) = plan
        .mounts
        .iter()
        .zip(&present.proc_files)
        .partition(|(m, _)| in_ldcache_folder(&m.container, &plan.ldcache_folders));
    let mut mount = |(m, present): (&MountPlan, &bool)| {
        if !present {
            done.proc_files_absent.push(m.container.clone());
            return Ok(());
        }
        root.bind_mount(&m.host, &m.container, m.options)
            .map_err(step("bind-mounting driver files"))?;
        done.mounts += 1;
        Ok::<(), PrestartError>(())
    };
    for m in for_ldconfig {
        mount(m)?;
    }
    done.symlinks = create_symlinks_in(&root, &plan.symlinks)
        .map_err(step("creating symlinks"))?
        .len();
    let ldconfig = if plan.ldcache_folders.is_empty() {
        None
    } else {
        let opts = LdcacheOptions::new(t.uid, t.gid);
        Some(
            start_ldcache_update(t.rootfs, &plan.ldcache_folders, t.ldconfig, opts)
                .map_err(step("updating the container's ld.so.cache"))?,
        )
    };
    for m in rest {
        mount(m)?;
    }
    done.devices = make_device_nodes(&root, plan).map_err(step("creating device nodes"))?;
    tracing::debug!(
        container = t.container,
        nodes = done.devices,
        mounts = done.mounts,
        symlinks = done.symlinks,
        "nodes created, driver files mounted, symlinks created"
    );
    if let (Some(host), true) = (&plan.params, present.params) {
        done.params_overridden = disable_device_node_modification(t.rootfs, host)
            .map_err(step("overriding /proc/driver/nvidia/params"))?;
    }
    if let Some(ldconfig) = ldconfig {
        ldconfig
            .wait()
            .map_err(step("updating the container's ld.so.cache"))?;
        done.ldcache_updated = true;
    }
    Ok(done)
}

/// Whether the container path `path` lies in one of the ldcache `folders` (ldconfig reads it).
fn in_ldcache_folder(path: &Path, folders: &[PathBuf]) -> bool {
    folders.iter().any(|f| path.starts_with(f))
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

/// Checks that the parent of every destination can be created or used (memoised per folder).
fn check_parents<'a>(
    root: &ContainerRoot,
    paths: impl Iterator<Item = &'a Path>,
) -> Result<(), InjectError> {
    let mut seen = HashSet::new();
    for p in paths {
        if let Some(parent) = p.parent() {
            if seen.insert(parent) {
                // Bounded: at most 40 links in all, as the kernel (see `walk_dirs`).
                root.walk_dirs(parent)?;
            }
        }
    }
    Ok(())
}

/// The image may already have the plan's nodes (an earlier start): only as the same char device.
fn check_device_nodes(root: &ContainerRoot, plan: &Plan) -> Result<(), InjectError> {
    for d in &plan.devices {
        match root.lstat(&d.path)? {
            None => {}
            Some(EntryKind::CharDevice { major, minor })
                if (major, minor) == (d.major, d.minor) => {}
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
    Ok(())
}

/// Checks every destination in the root without changing anything.
fn preflight(root: &ContainerRoot, plan: &Plan) -> Result<Present, InjectError> {
    let ldconf = Path::new(gpuhook_inject::ldcache::LDSO_CONF_DROPIN);
    let ldcache_paths = plan
        .ldcache_folders
        .iter()
        .map(|f| f.join("x"))
        .chain(std::iter::once(ldconf.to_path_buf()))
        .filter(|_| !plan.ldcache_folders.is_empty())
        .collect::<Vec<_>>();
    check_parents(
        root,
        plan.devices
            .iter()
            .map(|d| d.path.as_path())
            .chain(
                plan.mounts
                    .iter()
                    .filter(|m| !m.proc_file)
                    .map(|m| m.container.as_path()),
            )
            .chain(plan.symlinks.iter().map(|(_, l)| l.as_path()))
            .chain(ldcache_paths.iter().map(PathBuf::as_path)),
    )?;
    check_device_nodes(root, plan)?;
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
    let params =
        plan.params.is_some() && root.lstat(Path::new(PARAMS_PATH))? == Some(EntryKind::File);
    Ok(Present { proc_files, params })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walk_resolves_links_inside_the_root_and_refuses_dangling_ones() {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        std::fs::create_dir_all(r.join("usr/lib")).unwrap();
        std::fs::create_dir_all(r.join("etc")).unwrap();
        std::fs::write(r.join("etc/passwd"), "").unwrap();
        std::os::unix::fs::symlink("/tmp/canary", r.join("usr/lib/abs")).unwrap();
        std::os::unix::fs::symlink("../../../../../tmp/canary", r.join("usr/lib/rel")).unwrap();
        std::os::unix::fs::symlink("loop2", r.join("loop1")).unwrap();
        std::os::unix::fs::symlink("loop1", r.join("loop2")).unwrap();
        let root = ContainerRoot::open(r).unwrap();
        let walk = |p: &str| root.walk_dirs(Path::new(p));

        for p in ["/usr/lib/abs/x", "/usr/lib/rel"] {
            let err = walk(p).unwrap_err().to_string();
            assert!(
                err.contains("dangles inside the container root"),
                "{p}: {err}"
            );
        }
        std::fs::create_dir_all(r.join("tmp/canary")).unwrap();
        assert_eq!(walk("/usr/lib/abs").unwrap(), Some("/tmp/canary".into()));
        assert_eq!(
            walk("/usr/lib/rel/sub").unwrap(),
            None,
            "sub will be created"
        );
        assert_eq!(walk("/usr/lib/rel").unwrap(), Some("/tmp/canary".into()));
        assert_eq!(walk("/opt/nvidia").unwrap(), None);
        let err = walk("/etc/passwd/x").unwrap_err().to_string();
        assert!(err.contains("where a directory is needed"), "{err}");
        let err = walk("/loop1/x").unwrap_err().to_string();
        assert!(err.contains("too many levels of symlinks"), "{err}");
    }
}
