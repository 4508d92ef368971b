//! A cheap fingerprint of the node state a CDI spec depends on.
//!
//! A spec goes stale when the driver changes (new version, new libraries) or when a GPU is
//! re-partitioned into other MIG devices. Finding that out through NVML costs a library load and
//! tens of milliseconds; the kernel module shows the same facts in a few small `/proc` files, so a
//! watcher can poll them every second or two and regenerate only when they differ:
//!
//! - `/proc/driver/nvidia/version` (driver version),
//! - `/proc/driver/nvidia/gpus/*/information` (which GPUs, their minors and bus ids),
//! - the capability tree `/proc/driver/nvidia/capabilities/**` (one `access` file per MIG GPU
//!   instance `gpu<N>/mig/gi<G>` and compute instance `.../ci<C>`: they appear and disappear with
//!   re-partitioning; the static `/proc/driver/nvidia-caps/mig-minors` does not change with it),
//! - `/proc/driver/nvidia-caps/mig-minors` and `/proc/devices` (device numbers),
//! - the identity (inode, size, mtime) of the driver root's `/etc/ld.so.cache`, which the driver's
//!   installer rebuilds: a driver upgrade changes the library files before the new module loads.
//!
//! Every read is bounded (file size, entries per directory, depth), so a broken or hostile driver
//! root costs one error, not memory. A missing file is part of the state (no driver loaded), not
//! an error.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::bounded::{read_bounded, BoundedReadError};
use crate::discover::LD_SO_CACHE;
use crate::procfs::{
    parse_device_file_minor, ProcFs, PROC_CAPABILITIES, PROC_DEVICES, PROC_GPUS, PROC_MIG_MINORS,
    PROC_VERSION,
};

/// Largest `/proc` file read (the real ones are well under 4 KiB; mig-minors of 8 GPUs ~20 KiB).
pub const MAX_PROC_FILE_BYTES: u64 = 256 << 10;
/// Most entries read from one directory (GPUs, capability subdirectories).
pub const MAX_DIR_ENTRIES: usize = 1024;
/// Most files in the whole fingerprint (8 GPUs x 7 GIs x 8 CIs is under 600).
pub const MAX_FILES: usize = 8192;
/// Depth of the capability tree: `gpu0/mig/gi1/ci0/access`.
const MAX_CAP_DEPTH: usize = 5;

/// Why a fingerprint could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum FingerprintError {
    #[error(transparent)]
    Read(#[from] BoundedReadError),
    #[error("cannot list {}: {error}", path.display())]
    List {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{} has more than {limit} entries; refusing to fingerprint a driver root this large", path.display())]
    TooMany { path: PathBuf, limit: usize },
}

/// One MIG capability of the capability tree: `gpu<gpu_minor>/mig/gi<gi>[/ci<ci>]/access`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct MigCap {
    pub gpu_minor: u32,
    pub gi: u32,
    pub ci: Option<u32>,
    /// `DeviceFileMinor`: the `/dev/nvidia-caps/nvidia-cap<minor>` node.
    pub cap_minor: u32,
}

/// What the files of the node state contained; equal fingerprints mean an equal spec.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fingerprint {
    /// In-root path -> contents (or, for `ld.so.cache`, its identity); absent files are absent.
    entries: BTreeMap<String, Vec<u8>>,
}

impl Fingerprint {
    /// Takes the fingerprint of the driver root `driver_root`.
    pub fn take(driver_root: &Path) -> Result<Fingerprint, FingerprintError> {
        let proc = ProcFs::new(driver_root);
        let mut fp = Fingerprint::default();
        for p in [PROC_VERSION, PROC_MIG_MINORS, PROC_DEVICES] {
            fp.add_file(&proc, p)?;
        }
        for gpu in list_dir(&proc.path(PROC_GPUS))? {
            fp.add_file(&proc, &format!("{PROC_GPUS}/{gpu}/information"))?;
        }
        fp.add_tree(&proc, PROC_CAPABILITIES, 0)?;
        let cache = proc.path(LD_SO_CACHE);
        if let Ok(m) = std::fs::metadata(&cache) {
            let id = format!("{}:{}:{}:{}", m.dev(), m.ino(), m.len(), m.mtime_nsec());
            let id = format!("{id}:{}", m.mtime());
            fp.entries.insert(LD_SO_CACHE.to_string(), id.into_bytes());
        }
        Ok(fp)
    }

    /// Number of files that went into it.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing of the driver was found.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The driver version of `/proc/driver/nvidia/version`, if loaded.
    pub fn driver_version(&self) -> Option<String> {
        let text = self.entries.get(PROC_VERSION)?;
        crate::procfs::parse_driver_version(&String::from_utf8_lossy(text))
    }

    /// The MIG GPU and compute instances the capability tree shows, sorted.
    pub fn mig_caps(&self) -> Vec<MigCap> {
        let prefix = format!("{PROC_CAPABILITIES}/");
        let mut caps: Vec<MigCap> = self
            .entries
            .iter()
            .filter_map(|(path, text)| {
                let rel = path.strip_prefix(&prefix)?;
                let (gpu_minor, gi, ci) = parse_mig_access_path(rel)?;
                let cap_minor = parse_device_file_minor(&String::from_utf8_lossy(text))?;
                Some(MigCap {
                    gpu_minor,
                    gi,
                    ci,
                    cap_minor,
                })
            })
            .collect();
        caps.sort_unstable();
        caps
    }

    /// In-root paths whose contents differ between `self` and `other` (added, removed, changed).
    pub fn changed_paths(&self, other: &Fingerprint) -> Vec<String> {
        let mut out: Vec<String> = self
            .entries
            .iter()
            .filter(|(k, v)| other.entries.get(*k) != Some(*v))
            .map(|(k, _)| k.clone())
            .collect();
        out.extend(
            other
                .entries
                .keys()
                .filter(|k| !self.entries.contains_key(*k))
                .cloned(),
        );
        out.sort_unstable();
        out
    }

    fn add_file(&mut self, proc: &ProcFs, rel: &str) -> Result<(), FingerprintError> {
        if self.entries.len() >= MAX_FILES {
            return Err(FingerprintError::TooMany {
                path: proc.path(PROC_CAPABILITIES),
                limit: MAX_FILES,
            });
        }
        match read_bounded(&proc.path(rel), MAX_PROC_FILE_BYTES) {
            Ok(bytes) => {
                self.entries.insert(rel.to_string(), bytes);
                Ok(())
            }
            Err(e) if e.io_kind() == Some(std::io::ErrorKind::NotFound) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Adds every file of the tree `rel` (directories down to [`MAX_CAP_DEPTH`]).
    fn add_tree(&mut self, proc: &ProcFs, rel: &str, depth: usize) -> Result<(), FingerprintError> {
        for name in list_dir(&proc.path(rel))? {
            let child = format!("{rel}/{name}");
            let path = proc.path(&child);
            // symlink_metadata: a link in the tree is recorded by name only, never followed.
            match std::fs::symlink_metadata(&path) {
                Ok(m) if m.is_dir() && depth < MAX_CAP_DEPTH => {
                    self.add_tree(proc, &child, depth + 1)?
                }
                Ok(m) if m.is_file() => self.add_file(proc, &child)?,
                Ok(_) => {
                    self.entries.insert(child, Vec::new());
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(error) => return Err(FingerprintError::List { path, error }),
            }
        }
        Ok(())
    }
}

/// `gpu0/mig/gi1/access` -> (0, 1, None); `gpu0/mig/gi1/ci0/access` -> (0, 1, Some(0)).
pub fn parse_mig_access_path(rel: &str) -> Option<(u32, u32, Option<u32>)> {
    let parts: Vec<&str> = rel.split('/').collect();
    let num = |s: &str, prefix: &str| s.strip_prefix(prefix)?.parse::<u32>().ok();
    match parts.as_slice() {
        [gpu, "mig", gi, "access"] => Some((num(gpu, "gpu")?, num(gi, "gi")?, None)),
        [gpu, "mig", gi, ci, "access"] => {
            Some((num(gpu, "gpu")?, num(gi, "gi")?, Some(num(ci, "ci")?)))
        }
        _ => None,
    }
}

/// Sorted names in `dir` (at most [`MAX_DIR_ENTRIES`]); a missing directory is empty.
fn list_dir(dir: &Path) -> Result<Vec<String>, FingerprintError> {
    let list = |error| FingerprintError::List {
        path: dir.to_path_buf(),
        error,
    };
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(list(e)),
    };
    let mut names = Vec::new();
    for entry in entries {
        if names.len() >= MAX_DIR_ENTRIES {
            return Err(FingerprintError::TooMany {
                path: dir.to_path_buf(),
                limit: MAX_DIR_ENTRIES,
            });
        }
        names.push(
            entry
                .map_err(list)?
                .file_name()
                .to_string_lossy()
                .into_owned(),
        );
    }
    names.sort_unstable();
    Ok(names)
}

#[cfg(test)]
#[path = "fingerprint_tests.rs"]
mod tests;
