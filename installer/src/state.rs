//! What `install` did to the host, recorded so that `uninstall` removes exactly that.
//!
//! Only what gpuhook itself wrote is recorded, by exact path (see `snapshot`): the files its
//! steps name (the spec, the inventory cache, the files `runtime configure` reports, the hook
//! link), never the other files of the shared directories they live in. `runtime configure` has
//! no undo of its own, so the content a changed file had before the first install is kept here,
//! and restored only if the file still holds what the install left (else someone edited it
//! since, and `uninstall` refuses rather than throw their edit away).
//!
//! `uninstall` can be resumed: a changed file that already holds its content from before the
//! install counts as restored, a created file already gone as removed, so a rerun after a
//! failure part-way finishes the job.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use anyhow::Context;
use gpuhook_fs::AtomicWriter;
use serde::{Deserialize, Serialize};

use crate::link::{self, Link};
use crate::restart::Runtime;
use crate::snapshot::Snapshot;

/// File name of the state record, in the install directory.
pub const STATE_FILE: &str = ".gpuhook-installer.json";

/// A file that existed and was changed by the install.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Changed {
    pub path: PathBuf,
    /// Content before the first install.
    #[serde(with = "content")]
    pub before: Vec<u8>,
    /// Content the (last) install left.
    #[serde(with = "content")]
    pub after: Vec<u8>,
}

/// File content in the state file: UTF-8 text as a string (readable by an admin), anything
/// else as an array of bytes.
mod content {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    #[serde(untagged)]
    enum Repr {
        Text(String),
        Bytes(Vec<u8>),
    }

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        match std::str::from_utf8(bytes) {
            Ok(text) => Repr::Text(text.to_string()),
            Err(_) => Repr::Bytes(bytes.to_vec()),
        }
        .serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        Ok(match Repr::deserialize(d)? {
            Repr::Text(text) => text.into_bytes(),
            Repr::Bytes(bytes) => bytes,
        })
    }
}

/// The record: everything is a host path.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    /// Directories the install created, parents first.
    pub created_dirs: Vec<PathBuf>,
    /// Files the install created.
    pub created_files: Vec<PathBuf>,
    /// Files the install changed.
    pub changed_files: Vec<Changed>,
    /// An install changed containerd's config, so `uninstall` restarts containerd too.
    #[serde(default)]
    pub containerd_configured: bool,
    /// Links the install made (the `nvidia-container-runtime-hook` entry for Docker).
    #[serde(default)]
    pub links: Vec<Link>,
    /// The other engines (Docker, CRI-O) whose config an install changed, so `uninstall` makes
    /// them reload too.
    #[serde(default)]
    pub engines_configured: Vec<Configured>,
}

/// An engine whose config an install changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Configured {
    pub runtime: Runtime,
    /// Its main config (host path).
    pub config: PathBuf,
}

impl State {
    /// Reads the record, `None` when there is none.
    pub fn load(path: &Path) -> anyhow::Result<Option<State>> {
        match fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map(Some).with_context(|| {
                format!("{} is not a gpuhook-installer state file", path.display())
            }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
        }
    }

    /// Writes the record atomically.
    pub fn save(&self, path: &Path) -> anyhow::Result<()> {
        let json = serde_json::to_vec_pretty(self).context("cannot encode the installer state")?;
        let writer = AtomicWriter::new(0o600).keep_mode().keep_owner();
        writer.write(path, &json)?;
        Ok(())
    }

    /// Adds a directory the install created (once).
    pub fn add_dir(&mut self, dir: &Path) {
        if !self.created_dirs.iter().any(|d| d == dir) {
            self.created_dirs.push(dir.to_path_buf());
        }
    }

    /// Adds a file the install created (once).
    pub fn add_file(&mut self, file: &Path) {
        if !self.created_files.iter().any(|f| f == file) {
            self.created_files.push(file.to_path_buf());
        }
    }

    /// Merges what changed between two snapshots. A file created or changed by an earlier
    /// install keeps its first record (the content before *any* install).
    pub fn record(&mut self, before: &Snapshot, after: &Snapshot) {
        for (path, now) in &after.0 {
            match before.0.get(path) {
                None => self.add_file(path),
                Some(old) if old != now => self.record_change(path, old, now),
                Some(_) => {}
            }
        }
    }

    /// Records that the install changed `path` from `old` to `now` (the first `old` is kept).
    pub fn record_change(&mut self, path: &Path, old: &[u8], now: &[u8]) {
        if let Some(c) = self.changed_files.iter_mut().find(|c| c.path == path) {
            c.after = now.to_vec();
        } else if !self.created_files.iter().any(|f| f == path) {
            self.changed_files.push(Changed {
                path: path.to_path_buf(),
                before: old.to_vec(),
                after: now.to_vec(),
            });
        }
    }

    /// Records that an install changed `runtime`'s config (containerd: the flag of old state
    /// files).
    pub fn add_configured(&mut self, runtime: Runtime, config: &Path) {
        if runtime == Runtime::Containerd {
            self.containerd_configured = true;
        } else if !self.engines_configured.iter().any(|c| c.runtime == runtime) {
            self.engines_configured.push(Configured {
                runtime,
                config: config.to_path_buf(),
            });
        }
    }

    /// The engines whose config an install changed.
    pub fn configured(&self) -> Vec<Configured> {
        let containerd = self.containerd_configured.then(|| Configured {
            runtime: Runtime::Containerd,
            config: PathBuf::new(),
        });
        containerd
            .into_iter()
            .chain(self.engines_configured.iter().cloned())
            .collect()
    }

    /// Adds a link the install made (once per path).
    pub fn add_link(&mut self, made: Link) {
        self.links.retain(|l| l.path != made.path);
        self.links.push(made);
    }

    /// Undoes the record: checks first that every changed file still holds what the install
    /// left, or already what it held before (a resumed uninstall), and touches nothing
    /// otherwise; then restores them, puts the links' previous entries back, removes the created
    /// files, the state file and the created directories that are empty.
    pub fn undo(&self, state_file: &Path) -> anyhow::Result<()> {
        let mut to_restore = Vec::new();
        for c in &self.changed_files {
            let now =
                fs::read(&c.path).with_context(|| format!("cannot read {}", c.path.display()))?;
            if now == c.before {
                continue;
            }
            anyhow::ensure!(
                now == c.after,
                "{} was changed after gpuhook was installed; nothing was uninstalled. Remove \
                 gpuhook's entries from it by hand (or restore it), then run uninstall again",
                c.path.display()
            );
            to_restore.push(c);
        }
        for c in to_restore {
            let writer = AtomicWriter::new(0o644).keep_mode().keep_owner();
            writer
                .write(&c.path, &c.before)
                .with_context(|| format!("cannot restore {}", c.path.display()))?;
            tracing::info!(path = %c.path.display(), "restored");
        }
        for l in self.links.iter().rev() {
            link::undo(l)?;
        }
        for f in self.created_files.iter().rev() {
            remove(f, fs::remove_file(f))?;
        }
        remove(state_file, fs::remove_file(state_file))?;
        for d in self.created_dirs.iter().rev() {
            match fs::remove_dir(d) {
                Err(e) if e.raw_os_error() == Some(nix::errno::Errno::ENOTEMPTY as i32) => {
                    tracing::warn!(dir = %d.display(), "kept: holds files gpuhook did not install");
                }
                r => remove(d, r)?,
            }
        }
        Ok(())
    }
}

fn remove(path: &Path, result: io::Result<()>) -> anyhow::Result<()> {
    match result {
        Ok(()) => {
            tracing::info!(path = %path.display(), "removed");
            Ok(())
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("cannot remove {}", path.display())),
    }
}

#[cfg(test)]
#[path = "state_tests.rs"]
mod tests;
