//! The driver's device nodes as they are on the node: which exist, and their mode and owner.
//!
//! A spec must declare only the nodes a node has (`/dev/nvidia-modeset` and `/dev/nvidia-uvm-tools`
//! are optional: no display driver, no UVM tools) and give each the host node's mode, so that a
//! MIG capability node that is 0444 on the host is 0444 in the container too, not the runtime's
//! default 0666. NVIDIA's generator takes the same facts from `lstat` of the host node
//! (nvidia-container-toolkit internal/edits/device.go: `fromPathOrDefault`, through runc's
//! `devices.DeviceFromPath`). One `lstat` per node, done once at discovery: the inventory carries
//! the result to the prestart hook and the runtime wrapper.

use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

pub use crate::inventory::DevNode;
use crate::inventory::{join_under, Gpu, MigControlCaps};
use crate::rootfs::{lstat_at, open_host_dir};

/// `/dev/nvidiactl`.
pub const NVIDIACTL: &str = "/dev/nvidiactl";
/// `/dev/nvidia-modeset`.
pub const NVIDIA_MODESET: &str = "/dev/nvidia-modeset";
/// `/dev/nvidia-uvm`.
pub const NVIDIA_UVM: &str = "/dev/nvidia-uvm";
/// `/dev/nvidia-uvm-tools`.
pub const NVIDIA_UVM_TOOLS: &str = "/dev/nvidia-uvm-tools";
/// The control nodes, in the order a spec lists them.
pub const CONTROL_NODES: [&str; 4] = [NVIDIACTL, NVIDIA_MODESET, NVIDIA_UVM, NVIDIA_UVM_TOOLS];

/// Container path of a MIG capability node.
pub fn cap_node_path(minor: u32) -> String {
    format!("/dev/nvidia-caps/nvidia-cap{minor}")
}

/// Container path of a GPU node.
pub fn gpu_node_path(minor: u32) -> String {
    format!("/dev/nvidia{minor}")
}

/// `lstat` of `dev_root` + `path`, when it is a character device.
pub fn stat_node(dev_root: &Path, path: &str) -> Option<DevNode> {
    let meta = std::fs::symlink_metadata(join_under(dev_root, Path::new(path))).ok()?;
    char_node(path, meta.mode(), meta.rdev(), meta.uid(), meta.gid())
}

/// The node at `path` with `lstat`'s fields, when they say it is a character device.
fn char_node(path: &str, mode: u32, rdev: u64, uid: u32, gid: u32) -> Option<DevNode> {
    if mode & libc::S_IFMT != libc::S_IFCHR {
        tracing::warn!(path, "not a character device; not declared");
        return None;
    }
    Some(DevNode {
        path: path.to_string(),
        major: libc::major(rdev),
        minor: libc::minor(rdev),
        mode: mode & 0o7777,
        uid,
        gid,
    })
}

/// The dev root's `/dev`, opened once: each node is `lstat`ed relative to it (`nvidia0`), not
/// through a long host path the kernel walks again for every node.
struct DevDir<'a> {
    dev_root: &'a Path,
    fd: std::io::Result<OwnedFd>,
}

impl<'a> DevDir<'a> {
    fn open(dev_root: &'a Path) -> Self {
        let fd = open_host_dir(&join_under(dev_root, Path::new("/dev")));
        DevDir { dev_root, fd }
    }

    /// `lstat` of the node at container path `path` (`Err` when it does not exist), and the node
    /// when it is a character device.
    fn lstat(&self, path: &str) -> std::io::Result<Option<DevNode>> {
        let Some(rel) = path.strip_prefix("/dev/") else {
            let meta = std::fs::symlink_metadata(join_under(self.dev_root, Path::new(path)))?;
            return Ok(char_node(
                path,
                meta.mode(),
                meta.rdev(),
                meta.uid(),
                meta.gid(),
            ));
        };
        let fd = self
            .fd
            .as_ref()
            .map_err(|e| std::io::Error::from(e.kind()))?;
        let st = lstat_at(fd.as_fd(), OsStr::new(rel))?;
        Ok(char_node(
            path, st.st_mode, st.st_rdev, st.st_uid, st.st_gid,
        ))
    }
}

/// Every driver node of interest that exists under `dev_root`: control nodes, GPU nodes, MIG
/// capability nodes (of the MIG devices and of `config`/`monitor`), sorted by path.
pub fn discover_nodes(
    dev_root: &Path,
    gpus: &[Gpu],
    mig_caps: Option<&MigControlCaps>,
) -> Vec<DevNode> {
    discover_nodes_and_ctl(dev_root, gpus, mig_caps).0
}

/// [`discover_nodes`], and whether `/dev/nvidiactl` exists at all (of any type): discovery
/// warns when it does not, from this one `lstat`.
pub fn discover_nodes_and_ctl(
    dev_root: &Path,
    gpus: &[Gpu],
    mig_caps: Option<&MigControlCaps>,
) -> (Vec<DevNode>, bool) {
    let mut paths: Vec<String> = CONTROL_NODES.iter().map(|p| p.to_string()).collect();
    for gpu in gpus {
        paths.push(gpu_node_path(gpu.minor));
        for mig in &gpu.mig_devices {
            paths.push(cap_node_path(mig.gi_cap_minor));
            paths.push(cap_node_path(mig.ci_cap_minor));
        }
    }
    if let Some(c) = mig_caps {
        paths.push(cap_node_path(c.config_minor));
        paths.push(cap_node_path(c.monitor_minor));
    }
    paths.sort();
    paths.dedup();
    let dev = DevDir::open(dev_root);
    let mut ctl = false;
    let mut nodes = Vec::new();
    for path in &paths {
        let found = dev.lstat(path);
        ctl |= path == NVIDIACTL && found.is_ok();
        nodes.extend(found.ok().flatten());
    }
    (nodes, ctl)
}

/// Most directory entries looked at by one [`scan_nodes`].
pub const MAX_SCANNED_ENTRIES: usize = 4096;

/// The character devices of `dev_root` + `dir` whose names start with `prefix` (NVIDIA's
/// `/dev/nvidia-fs*`-style patterns), sorted by path; bounded to [`MAX_SCANNED_ENTRIES`].
pub fn scan_nodes(dev_root: &Path, dir: &str, prefix: &str) -> Vec<DevNode> {
    let Ok(entries) = std::fs::read_dir(join_under(dev_root, Path::new(dir))) else {
        return Vec::new();
    };
    // `DirEntry::metadata` is `lstat` relative to the open folder: one short look-up per node.
    let mut found: Vec<(String, std::fs::Metadata)> = entries
        .take(MAX_SCANNED_ENTRIES)
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let meta = name.starts_with(prefix).then(|| e.metadata().ok())??;
            Some((name, meta))
        })
        .collect();
    found.sort_by(|a, b| a.0.cmp(&b.0));
    let dir = dir.trim_end_matches('/');
    found
        .iter()
        .filter_map(|(n, m)| char_node(&format!("{dir}/{n}"), m.mode(), m.rdev(), m.uid(), m.gid()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::stat::{makedev, mknod, Mode, SFlag};

    fn mk(root: &Path, path: &str, minor: u64, mode: u32) -> bool {
        let host = join_under(root, Path::new(path));
        std::fs::create_dir_all(host.parent().unwrap()).unwrap();
        let ok = mknod(
            &host,
            SFlag::S_IFCHR,
            Mode::from_bits_truncate(mode),
            makedev(195, minor),
        )
        .is_ok();
        if ok {
            // mknod's mode goes through the umask; make it exact.
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&host, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        ok
    }

    #[test]
    fn nvidiactl_is_reported_as_existing_even_when_it_is_no_device() {
        // Discovery warns about a missing /dev/nvidiactl from the same lstat that declares it.
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        assert_eq!(discover_nodes_and_ctl(r, &[], None), (Vec::new(), false));
        std::fs::create_dir_all(r.join("dev")).unwrap();
        assert_eq!(discover_nodes_and_ctl(r, &[], None), (Vec::new(), false));
        std::fs::write(join_under(r, Path::new(NVIDIACTL)), b"").unwrap();
        assert_eq!(discover_nodes_and_ctl(r, &[], None), (Vec::new(), true));
    }

    /// NVIDIA takes mode, major, minor and gid from lstat of the host node (nvidia-container-
    /// toolkit v1.20.0 internal/edits/device.go `fromPathOrDefault`, runc `DeviceFromPath`:
    /// `FileMode: mode &^ S_IFMT`); a node that does not exist is not declared.
    #[test]
    fn reads_mode_and_skips_missing_nodes() {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        if !mk(r, NVIDIACTL, 255, 0o666) {
            eprintln!("skipping: mknod needs CAP_MKNOD");
            return;
        }
        assert!(mk(r, "/dev/nvidia-caps/nvidia-cap21", 21, 0o444));
        std::fs::write(join_under(r, Path::new(NVIDIA_UVM)), b"").unwrap();
        let found = discover_nodes(r, &[], None);
        let paths: Vec<&str> = found.iter().map(|n| n.path.as_str()).collect();
        assert_eq!(paths, [NVIDIACTL], "regular file and missing nodes skipped");
        assert_eq!(found[0].mode, 0o666);
        let cap = stat_node(r, &cap_node_path(21)).unwrap();
        assert_eq!((cap.major, cap.minor, cap.mode), (195, 21, 0o444));
        assert!(stat_node(r, NVIDIA_MODESET).is_none());
        assert!(mk(r, "/dev/nvidia-fs0", 0, 0o666));
        let fs: Vec<String> = scan_nodes(r, "/dev", "nvidia-fs")
            .into_iter()
            .map(|n| n.path)
            .collect();
        assert_eq!(fs, ["/dev/nvidia-fs0"]);
    }
}
