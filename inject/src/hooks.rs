//! Bodies of the CDI hook subcommands (`create-symlinks`, `update-ldcache` lives in
//! [`crate::ldcache`], `disable-device-node-modification`) and of
//! `gpuhook system create-dev-char-symlinks`. The CLI wiring lives in the `gpuhook` crate.

use std::io::Write;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::error::{InjectError, Result};
use crate::root::{normalize_container_path, ContainerRoot, SymlinkOutcome};
use crate::sys::{EntryKind, MountOptions, Syscalls};

/// Where the driver's module parameters appear in a container with /proc mounted.
pub const PARAMS_PATH: &str = "/proc/driver/nvidia/params";

/// Parse a `--link target::link` argument.
pub fn parse_link_spec(spec: &str) -> Result<(PathBuf, PathBuf)> {
    match spec.split_once("::") {
        Some((t, l)) if !t.is_empty() && !l.is_empty() => Ok((t.into(), l.into())),
        _ => Err(InjectError::Invalid {
            what: "link",
            value: spec.to_string(),
            reason: "expected TARGET::LINK, e.g. libcuda.so.1::/usr/lib64/libcuda.so".into(),
        }),
    }
}

/// `create-symlinks`: every link is validated before anything is created (a bad entry never
/// leaves a half-done container).
pub fn create_symlinks(rootfs: &Path, links: &[(PathBuf, PathBuf)]) -> Result<Vec<SymlinkOutcome>> {
    for (_, link) in links {
        normalize_container_path(link)?;
    }
    create_symlinks_in(&ContainerRoot::open(rootfs)?, links)
}

/// [`create_symlinks`] on an already opened root.
pub fn create_symlinks_in<S: Syscalls>(
    root: &ContainerRoot<S>,
    links: &[(PathBuf, PathBuf)],
) -> Result<Vec<SymlinkOutcome>> {
    for (_, link) in links {
        normalize_container_path(link)?;
    }
    links.iter().map(|(t, l)| root.symlink(t, l)).collect()
}

/// The host params with `ModifyDeviceFiles: 0` (replacing the existing value, or appended).
pub fn params_without_device_modification(host: &str) -> String {
    let mut found = false;
    let mut out = String::with_capacity(host.len() + 24);
    for line in host.lines() {
        if line.split(':').next().map(str::trim) == Some("ModifyDeviceFiles") {
            out.push_str("ModifyDeviceFiles: 0\n");
            found = true;
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    if !found {
        out.push_str("ModifyDeviceFiles: 0\n");
    }
    out
}

/// `disable-device-node-modification` with `/run` (or `/tmp`) as scratch space.
pub fn disable_device_node_modification(rootfs: &Path, host_params: &Path) -> Result<bool> {
    let scratch = if Path::new("/run").is_dir() {
        "/run"
    } else {
        "/tmp"
    };
    disable_device_node_modification_in(rootfs, host_params, Path::new(scratch))
}

/// Mount a read-only copy of `host_params` with `ModifyDeviceFiles: 0` over the container's
/// `/proc/driver/nvidia/params`, so NVML inside cannot create device nodes. Only done when that
/// file exists in the container, i.e. when the container's /proc is mounted — true for
/// createContainer hooks (runc runs them after mounting /proc, before pivot_root) and for a
/// prestart hook inside [`crate::in_mount_namespace_of`]. Returns whether it mounted.
///
/// The copy is written to a uniquely named file in `scratch_dir` (a host directory visible in the
/// current mount namespace), bind-mounted, then unlinked: the mount keeps the inode alive and
/// nothing stays behind on the host. (A memfd cannot be bind-mounted: it lives on an internal
/// mount outside every namespace.)
pub fn disable_device_node_modification_in(
    rootfs: &Path,
    host_params: &Path,
    scratch_dir: &Path,
) -> Result<bool> {
    let root = ContainerRoot::open(rootfs)?;
    match root.lstat(Path::new(PARAMS_PATH))? {
        None => {
            tracing::info!(rootfs = %rootfs.display(), "no {PARAMS_PATH} in the container (proc not mounted); nothing to do");
            return Ok(false);
        }
        Some(EntryKind::File) => {}
        Some(other) => {
            return Err(InjectError::WrongType {
                path: PARAMS_PATH.into(),
                found: other.describe(),
                expected: "a regular (procfs) file",
            })
        }
    }
    let host = std::fs::read_to_string(host_params).map_err(|source| InjectError::Io {
        op: "read host driver params",
        path: host_params.to_path_buf(),
        error: source,
    })?;
    let contents = params_without_device_modification(&host);
    let tmp = scratch_dir.join(format!(
        ".gpuhook-params-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    ));
    let write = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o444)
        .open(&tmp)
        .and_then(|mut f| f.write_all(contents.as_bytes()));
    if let Err(source) = write {
        let _ = std::fs::remove_file(&tmp);
        return Err(InjectError::Io {
            op: "write params copy",
            path: tmp,
            error: source,
        });
    }
    let opts = MountOptions {
        read_only: true,
        nosuid: true,
        nodev: true,
        noexec: true,
    };
    let mounted = root.bind_mount(&tmp, Path::new(PARAMS_PATH), opts);
    let _ = std::fs::remove_file(&tmp);
    mounted.map(|()| true)
}

/// A device node under a `/dev` root, for `/dev/char` links.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DevCharNode {
    /// Path relative to the dev root, e.g. `nvidia0` or `nvidia-caps/nvidia-cap1`.
    pub path: PathBuf,
    pub major: u32,
    pub minor: u32,
}

/// Find NVIDIA character devices under `dev_root`: `nvidia*` and the nodes in `nvidia-caps/` and
/// `nvidia-caps-imex-channels/`. Sorted by path.
pub fn discover_dev_char_nodes(dev_root: &Path) -> Result<Vec<DevCharNode>> {
    let mut out = Vec::new();
    let mut scan = |dir: &Path, rel: &Path, prefix: &str| -> Result<()> {
        let entries = match std::fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(source) => {
                return Err(InjectError::Io {
                    op: "read dir",
                    path: dir.to_path_buf(),
                    error: source,
                })
            }
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            if !name.to_string_lossy().starts_with(prefix) {
                continue;
            }
            let Ok(md) = entry.path().symlink_metadata() else {
                continue;
            };
            if md.file_type().is_char_device() {
                out.push(DevCharNode {
                    path: rel.join(&name),
                    major: libc::major(md.rdev()),
                    minor: libc::minor(md.rdev()),
                });
            }
        }
        Ok(())
    };
    scan(dev_root, Path::new(""), "nvidia")?;
    for sub in ["nvidia-caps", "nvidia-caps-imex-channels"] {
        scan(&dev_root.join(sub), Path::new(sub), "")?;
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// `create-dev-char-symlinks`: `<dev_root>/char/<MAJ>:<MIN> -> ../<node>` for each node, as
/// udev would for a real driver (so tools that follow /dev/char — e.g. systemd's device
/// allow-lists — find the NVIDIA nodes). Idempotent; a different existing link is replaced.
pub fn create_dev_char_symlinks(
    dev_root: &Path,
    nodes: &[DevCharNode],
) -> Result<Vec<(PathBuf, SymlinkOutcome)>> {
    let root = ContainerRoot::open(dev_root)?;
    let mut out = Vec::with_capacity(nodes.len());
    for n in nodes {
        let rel = normalize_container_path(&n.path)?;
        let target = Path::new("..").join(rel.strip_prefix("/").unwrap_or(&rel));
        let link = PathBuf::from(format!("/char/{}:{}", n.major, n.minor));
        let outcome = root.symlink(&target, &link)?;
        out.push((link, outcome));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_rewrite() {
        let host = "ResmanDebugLevel: 4294967295\nModifyDeviceFiles: 1\nDeviceFileUID: 0\n";
        let out = params_without_device_modification(host);
        assert_eq!(
            out,
            "ResmanDebugLevel: 4294967295\nModifyDeviceFiles: 0\nDeviceFileUID: 0\n"
        );
        assert!(params_without_device_modification("A: 1\n").ends_with("ModifyDeviceFiles: 0\n"));
    }

    #[test]
    fn link_specs() {
        assert_eq!(
            parse_link_spec("libcuda.so.1::/usr/lib/libcuda.so").unwrap(),
            (
                PathBuf::from("libcuda.so.1"),
                PathBuf::from("/usr/lib/libcuda.so")
            )
        );
        assert!(parse_link_spec("nolink").is_err());
        assert!(parse_link_spec("::/x").is_err());
    }
}
