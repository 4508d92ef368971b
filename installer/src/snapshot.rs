//! Watching exactly the paths gpuhook writes, never whole directories.
//!
//! The directories `install` writes to (`/var/run/cdi`, `/etc/containerd`, `/var/run/gpuhook`)
//! are shared: gpu-mps-daemon, a DRA driver or an admin write there too, at any time (every
//! DaemonSet starts at boot). So the installer records only the files its own steps write, by
//! their exact paths (the spec file `cdi generate` names, the inventory cache, the files `runtime
//! configure` plans), and only the directories it made itself, one `mkdir` at a time.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use anyhow::Context;

/// Files larger than this are not snapshotted (config files and specs are far smaller).
const MAX_SNAPSHOT_BYTES: u64 = 4 << 20;

/// Some files (by exact path) with their content; a missing one is absent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot(pub BTreeMap<PathBuf, Vec<u8>>);

impl Snapshot {
    /// Reads each of `files` that is a regular file (a symlink is not followed); a missing file
    /// is left out, and so is one over 4 MiB.
    pub fn files<'a>(files: impl IntoIterator<Item = &'a Path>) -> anyhow::Result<Snapshot> {
        let mut out = BTreeMap::new();
        for path in files {
            let meta = match fs::symlink_metadata(path) {
                Ok(m) => m,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e).with_context(|| format!("cannot stat {}", path.display())),
            };
            if !meta.is_file() || meta.len() > MAX_SNAPSHOT_BYTES {
                continue;
            }
            let mut bytes = Vec::new();
            fs::File::open(path)
                .and_then(|f| f.take(MAX_SNAPSHOT_BYTES).read_to_end(&mut bytes))
                .with_context(|| format!("cannot read {}", path.display()))?;
            out.insert(path.to_path_buf(), bytes);
        }
        Ok(Snapshot(out))
    }
}

/// `mkdir -p dir`, telling `made` each directory this call made (not one that another writer
/// made meanwhile: `mkdir` tells them apart by EEXIST), parents first.
pub fn ensure_dir(dir: &Path, mut made: impl FnMut(&Path)) -> anyhow::Result<()> {
    let mut missing: Vec<&Path> = dir
        .ancestors()
        .take_while(|d| !d.as_os_str().is_empty() && fs::symlink_metadata(d).is_err())
        .collect();
    missing.reverse();
    for d in missing {
        match fs::create_dir(d) {
            Ok(()) => made(d),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e).with_context(|| format!("cannot create {}", d.display())),
        }
    }
    anyhow::ensure!(dir.is_dir(), "{} is not a directory", dir.display());
    Ok(())
}
