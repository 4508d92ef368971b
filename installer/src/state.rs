//! What `install` did to the host, recorded so that `uninstall` removes exactly that.
//!
//! The installer does not know which files `gpuhook cdi generate` and `gpuhook runtime
//! configure` write (a spec, an inventory cache, a config backup, a drop-in): it snapshots the
//! directories they write to before and after, and records the difference. `runtime configure`
//! has no undo of its own, so the content a changed file had before the first install is kept
//! here, and restored only if the file still holds what the install left (else someone edited it
//! since, and `uninstall` refuses rather than throw their edit away).

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use anyhow::Context;
use gpuhook_fs::AtomicWriter;
use serde::{Deserialize, Serialize};

/// File name of the state record, in the install directory.
pub const STATE_FILE: &str = ".gpuhook-installer.json";

/// Files larger than this are not snapshotted (config files and specs are far smaller).
const MAX_SNAPSHOT_BYTES: u64 = 4 << 20;

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
                Some(old) if old != now => {
                    if let Some(c) = self.changed_files.iter_mut().find(|c| &c.path == path) {
                        c.after.clone_from(now);
                    } else if !self.created_files.contains(path) {
                        self.changed_files.push(Changed {
                            path: path.clone(),
                            before: old.clone(),
                            after: now.clone(),
                        });
                    }
                }
                Some(_) => {}
            }
        }
    }

    /// Undoes the record: checks first that every changed file still holds what the install
    /// left (nothing is touched otherwise), then restores them, removes the created files, the
    /// state file and the created directories that are empty.
    pub fn undo(&self, state_file: &Path) -> anyhow::Result<()> {
        for c in &self.changed_files {
            let now =
                fs::read(&c.path).with_context(|| format!("cannot read {}", c.path.display()))?;
            anyhow::ensure!(
                now == c.after,
                "{} was changed after gpuhook was installed; nothing was uninstalled. Remove \
                 gpuhook's entries from it by hand (or restore it), then run uninstall again",
                c.path.display()
            );
        }
        for c in &self.changed_files {
            let writer = AtomicWriter::new(0o644).keep_mode().keep_owner();
            writer
                .write(&c.path, &c.before)
                .with_context(|| format!("cannot restore {}", c.path.display()))?;
            tracing::info!(path = %c.path.display(), "restored");
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

/// Missing ancestors of `dir`, outermost first (the directories `create_dir_all` would make).
pub fn missing_dirs(dir: &Path) -> Vec<PathBuf> {
    let mut missing: Vec<PathBuf> = dir
        .ancestors()
        .take_while(|d| !d.as_os_str().is_empty() && fs::symlink_metadata(d).is_err())
        .map(Path::to_path_buf)
        .collect();
    missing.reverse();
    missing
}

/// The regular files directly in some directories, with their content.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot(pub BTreeMap<PathBuf, Vec<u8>>);

impl Snapshot {
    /// Reads every regular file (not followed through symlinks) directly in `dirs`; a missing
    /// directory is empty, a file over 4 MiB is left out.
    pub fn take(dirs: &[PathBuf]) -> anyhow::Result<Snapshot> {
        let mut files = BTreeMap::new();
        for dir in dirs {
            let entries = match fs::read_dir(dir) {
                Ok(e) => e,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e).with_context(|| format!("cannot list {}", dir.display())),
            };
            for entry in entries {
                let entry = entry.with_context(|| format!("cannot list {}", dir.display()))?;
                let path = entry.path();
                let meta = entry
                    .metadata()
                    .with_context(|| format!("cannot stat {}", path.display()))?;
                if !meta.is_file() || meta.len() > MAX_SNAPSHOT_BYTES {
                    continue;
                }
                let mut bytes = Vec::new();
                fs::File::open(&path)
                    .and_then(|f| f.take(MAX_SNAPSHOT_BYTES).read_to_end(&mut bytes))
                    .with_context(|| format!("cannot read {}", path.display()))?;
                files.insert(path, bytes);
            }
        }
        Ok(Snapshot(files))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(p: &Path, s: &str) {
        fs::write(p, s).unwrap();
    }

    #[test]
    fn record_then_undo_restores_the_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("etc");
        fs::create_dir(&dir).unwrap();
        write(&dir.join("config.toml"), "version = 2\n");
        write(&dir.join("other"), "kept");
        let dirs = [dir.clone(), tmp.path().join("new")];
        let before = Snapshot::take(&dirs).unwrap();
        let mut state = State::default();
        for d in missing_dirs(&tmp.path().join("new")) {
            state.add_dir(&d);
        }
        fs::create_dir(tmp.path().join("new")).unwrap();
        write(&tmp.path().join("new/spec.json"), "{}");
        write(&dir.join("config.toml"), "version = 2\n[runtime]\n");
        write(&dir.join("config.toml.bak.1"), "version = 2\n");
        state.record(&before, &Snapshot::take(&dirs).unwrap());
        assert_eq!(state.created_dirs, [tmp.path().join("new")]);
        assert_eq!(state.created_files.len(), 2, "{state:?}");
        assert_eq!(state.changed_files.len(), 1);

        // A second install that changes the file again keeps the original content.
        let before2 = Snapshot::take(&dirs).unwrap();
        write(&dir.join("config.toml"), "version = 2\n[runtime2]\n");
        state.record(&before2, &Snapshot::take(&dirs).unwrap());
        assert_eq!(state.changed_files[0].before, b"version = 2\n");

        let state_file = tmp.path().join("state.json");
        state.save(&state_file).unwrap();
        let loaded = State::load(&state_file).unwrap().unwrap();
        assert_eq!(loaded, state);
        loaded.undo(&state_file).unwrap();
        assert_eq!(Snapshot::take(&dirs).unwrap(), before);
        assert!(!tmp.path().join("new").exists() && !state_file.exists());
    }

    #[test]
    fn undo_refuses_a_file_edited_after_install_and_touches_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let dirs = [tmp.path().to_path_buf()];
        write(&tmp.path().join("config.toml"), "a");
        let before = Snapshot::take(&dirs).unwrap();
        write(&tmp.path().join("config.toml"), "b");
        write(&tmp.path().join("created"), "c");
        let mut state = State::default();
        state.record(&before, &Snapshot::take(&dirs).unwrap());
        write(&tmp.path().join("config.toml"), "edited by the admin");
        let err = state.undo(&tmp.path().join("state.json")).unwrap_err();
        assert!(
            err.to_string()
                .contains("was changed after gpuhook was installed"),
            "{err}"
        );
        assert!(
            tmp.path().join("created").exists(),
            "nothing may be removed"
        );
        assert_eq!(
            fs::read_to_string(tmp.path().join("config.toml")).unwrap(),
            "edited by the admin"
        );
    }

    #[test]
    fn content_is_text_when_it_can_be_and_round_trips_either_way() {
        let c = Changed {
            path: PathBuf::from("/etc/x"),
            before: vec![0xff, 0],
            after: b"version = 2\n".to_vec(),
        };
        let json = serde_json::to_string(&c).unwrap();
        assert!(json.contains(r#""after":"version = 2\n""#), "{json}");
        assert!(json.contains(r#""before":[255,0]"#), "{json}");
        assert_eq!(serde_json::from_str::<Changed>(&json).unwrap(), c);
    }

    #[test]
    fn missing_dirs_lists_outermost_first() {
        let tmp = tempfile::tempdir().unwrap();
        let deep = tmp.path().join("a/b/c");
        assert_eq!(
            missing_dirs(&deep),
            [tmp.path().join("a"), tmp.path().join("a/b"), deep.clone()]
        );
        fs::create_dir_all(&deep).unwrap();
        assert!(missing_dirs(&deep).is_empty());
    }
}
