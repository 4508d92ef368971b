//! Loading the CDI spec directories, as a runtime does.
//!
//! Rules (those of the CDI library, so `gpuhook cdi list` and the runtime wrapper see what
//! containerd/CRI-O/podman see): directories in priority order (a later one wins for the same
//! qualified device), `*.json` and `*.yaml` files one level deep in lexical order, a broken or
//! invalid file is reported and skipped, and a device defined by two files of one directory is
//! dropped with an error (which one would win is not well defined).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::spec::{Device, Format, Spec};
use crate::validate::{join_errors, load_bytes};
use crate::CdiError;

/// Spec directories in priority order (later wins).
pub const DEFAULT_SPEC_DIRS: &[&str] = &["/etc/cdi", "/var/run/cdi"];

/// A spec file that loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadedSpec {
    pub path: PathBuf,
    /// Index of its directory in the list given to [`Registry::load`].
    pub priority: usize,
    pub spec: Spec,
}

/// A resolvable device: its spec and its position in `spec.devices`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistryDevice {
    pub spec: Arc<LoadedSpec>,
    pub index: usize,
}

impl RegistryDevice {
    pub fn device(&self) -> &Device {
        &self.spec.spec.devices[self.index]
    }
}

/// A problem met while loading (the rest still loads).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistryError {
    pub path: PathBuf,
    pub message: String,
}

impl fmt::Display for RegistryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.message)
    }
}

/// A device defined by more than one spec file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// Qualified name.
    pub device: String,
    /// The files that define it, in load order.
    pub files: Vec<PathBuf>,
    /// The file a runtime takes it from: the one in the later directory; `None` when the files
    /// share a directory and the device is dropped.
    pub winner: Option<PathBuf>,
}

/// Devices that the same files define, with the same outcome (for one line of explanation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConflictGroup {
    pub files: Vec<PathBuf>,
    pub winner: Option<PathBuf>,
    pub devices: Vec<String>,
}

/// All devices defined by the spec directories.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    /// By qualified name (`nvidia.com/gpu=0`).
    pub devices: BTreeMap<String, RegistryDevice>,
    /// Every spec that loaded, in load order.
    pub specs: Vec<Arc<LoadedSpec>>,
    pub errors: Vec<RegistryError>,
    /// Devices defined by two files: shadowed by a later directory, or dropped within one.
    pub conflicts: Vec<Conflict>,
}

impl Registry {
    /// Loads [`DEFAULT_SPEC_DIRS`].
    pub fn load_default() -> Registry {
        Registry::load(DEFAULT_SPEC_DIRS)
    }

    /// Loads `dirs` in priority order; a missing directory is skipped silently. Conflicts are
    /// resolved as the CDI library does (container-device-interface pkg/cdi/cache.go
    /// `refresh`): a later directory replaces a device, and a device defined twice within one
    /// directory is dropped at the end, whatever a later directory says about it.
    pub fn load<P: AsRef<Path>>(dirs: &[P]) -> Registry {
        let mut reg = Registry::default();
        let mut dropped: BTreeSet<String> = BTreeSet::new();
        for (priority, dir) in dirs.iter().enumerate() {
            for path in reg.spec_files(dir.as_ref()) {
                let Some(spec) = reg.load_file(&path, priority) else {
                    continue;
                };
                let spec = Arc::new(spec);
                reg.specs.push(spec.clone());
                for (index, (name, _)) in spec.spec.qualified_devices().enumerate() {
                    let dev = RegistryDevice {
                        spec: spec.clone(),
                        index,
                    };
                    reg.add(name, dev, &mut dropped);
                }
            }
        }
        for name in &dropped {
            reg.devices.remove(name);
        }
        for c in &mut reg.conflicts {
            if dropped.contains(&c.device) {
                c.winner = None;
            }
        }
        reg
    }

    fn add(&mut self, name: String, dev: RegistryDevice, dropped: &mut BTreeSet<String>) {
        let Some(old) = self.devices.get(&name) else {
            self.devices.insert(name, dev);
            return;
        };
        let files = vec![old.spec.path.clone(), dev.spec.path.clone()];
        if old.spec.priority == dev.spec.priority {
            self.error(
                &dev.spec.path,
                format!(
                    "device {name} is also defined in {}; it is ignored (define each device in one file)",
                    old.spec.path.display()
                ),
            );
            dropped.insert(name.clone());
            self.conflicts.push(Conflict {
                device: name,
                files,
                winner: None,
            });
        } else {
            self.conflicts.push(Conflict {
                device: name.clone(),
                files,
                winner: Some(dev.spec.path.clone()),
            });
            self.devices.insert(name, dev);
        }
    }

    /// [`Registry::conflicts`] grouped by files and outcome, in a stable order.
    pub fn conflict_groups(&self) -> Vec<ConflictGroup> {
        let mut groups: BTreeMap<(Vec<PathBuf>, Option<PathBuf>), Vec<String>> = BTreeMap::new();
        for c in &self.conflicts {
            groups
                .entry((c.files.clone(), c.winner.clone()))
                .or_default()
                .push(c.device.clone());
        }
        groups
            .into_iter()
            .map(|((files, winner), devices)| ConflictGroup {
                files,
                winner,
                devices,
            })
            .collect()
    }

    fn error(&mut self, path: &Path, message: impl Into<String>) {
        self.errors.push(RegistryError {
            path: path.into(),
            message: message.into(),
        });
    }

    /// The `*.json` and `*.yaml` files of `dir`, in lexical order.
    fn spec_files(&mut self, dir: &Path) -> Vec<PathBuf> {
        let entries = match fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) if e.kind() == ErrorKind::NotFound => return Vec::new(),
            Err(e) => {
                self.error(dir, format!("cannot read spec directory: {e}"));
                return Vec::new();
            }
        };
        let mut files: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| Format::from_path(p).is_some())
            .collect();
        files.sort();
        files
    }

    fn load_file(&mut self, path: &Path, priority: usize) -> Option<LoadedSpec> {
        match fs::metadata(path) {
            Ok(m) if m.is_file() => {}
            Ok(_) => return None,
            Err(e) => {
                self.error(path, format!("cannot stat: {e}"));
                return None;
            }
        }
        let bytes = match crate::read_spec_file(path) {
            Ok(b) => b,
            Err(e) => {
                self.error(path, e.to_string());
                return None;
            }
        };
        match load_bytes(&bytes, Format::from_path(path)) {
            Ok(spec) => Some(LoadedSpec {
                path: path.into(),
                priority,
                spec,
            }),
            Err(errors) => {
                self.error(path, format!("invalid CDI spec: {}", join_errors(&errors)));
                None
            }
        }
    }

    /// The device with this qualified name.
    pub fn get(&self, qualified: &str) -> Option<&RegistryDevice> {
        self.devices.get(qualified)
    }

    /// Resolves every name (request order, duplicates once), or fails with all unknown names.
    pub fn resolve(&self, names: &[String]) -> Result<Vec<&RegistryDevice>, CdiError> {
        let mut unknown: Vec<String> = Vec::new();
        let mut resolved = Vec::new();
        let mut seen: BTreeSet<&str> = BTreeSet::new();
        for name in names {
            if !seen.insert(name) {
                continue;
            }
            match self.get(name) {
                Some(d) => resolved.push(d),
                None => unknown.push(name.clone()),
            }
        }
        if unknown.is_empty() {
            Ok(resolved)
        } else {
            Err(CdiError::Unresolvable { names: unknown })
        }
    }

    /// Qualified names of every resolvable device, sorted.
    pub fn device_names(&self) -> impl Iterator<Item = &str> {
        self.devices.keys().map(String::as_str)
    }
}

#[cfg(test)]
#[path = "registry_tests.rs"]
mod tests;
