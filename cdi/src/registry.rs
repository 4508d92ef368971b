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

/// All devices defined by the spec directories.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    /// By qualified name (`nvidia.com/gpu=0`).
    pub devices: BTreeMap<String, RegistryDevice>,
    /// Every spec that loaded, in load order.
    pub specs: Vec<Arc<LoadedSpec>>,
    pub errors: Vec<RegistryError>,
}

impl Registry {
    /// Loads [`DEFAULT_SPEC_DIRS`].
    pub fn load_default() -> Registry {
        Registry::load(DEFAULT_SPEC_DIRS)
    }

    /// Loads `dirs` in priority order; a missing directory is skipped silently.
    pub fn load<P: AsRef<Path>>(dirs: &[P]) -> Registry {
        let mut reg = Registry::default();
        for (priority, dir) in dirs.iter().enumerate() {
            let dir = dir.as_ref();
            let in_dir = reg.load_dir(dir, priority);
            reg.devices.extend(in_dir);
        }
        reg
    }

    fn error(&mut self, path: &Path, message: impl Into<String>) {
        self.errors.push(RegistryError {
            path: path.into(),
            message: message.into(),
        });
    }

    fn load_dir(&mut self, dir: &Path, priority: usize) -> BTreeMap<String, RegistryDevice> {
        let mut devices: BTreeMap<String, RegistryDevice> = BTreeMap::new();
        let entries = match fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) if e.kind() == ErrorKind::NotFound => return devices,
            Err(e) => {
                self.error(dir, format!("cannot read spec directory: {e}"));
                return devices;
            }
        };
        let mut files: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| Format::from_path(p).is_some())
            .collect();
        files.sort();
        let mut conflicts: BTreeSet<String> = BTreeSet::new();
        for path in files {
            let Some(spec) = self.load_file(&path, priority) else {
                continue;
            };
            let spec = Arc::new(spec);
            self.specs.push(spec.clone());
            for (index, (name, _)) in spec.spec.qualified_devices().enumerate() {
                if conflicts.contains(&name) {
                    continue;
                }
                if let Some(other) = devices.remove(&name) {
                    conflicts.insert(name.clone());
                    self.error(
                        &path,
                        format!(
                            "device {name} is also defined in {}; it is ignored (define each device in one file)",
                            other.spec.path.display()
                        ),
                    );
                    continue;
                }
                devices.insert(
                    name,
                    RegistryDevice {
                        spec: spec.clone(),
                        index,
                    },
                );
            }
        }
        devices
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
        // Bounded: a spec dir is root's, but a huge file must cost an error, not the memory.
        use gpuhook_node::bounded::{read_bounded, BoundedReadError, MAX_CDI_SPEC_BYTES};
        let bytes = match read_bounded(path, MAX_CDI_SPEC_BYTES) {
            Ok(b) => b,
            Err(BoundedReadError::TooLarge { limit, .. }) => {
                self.error(path, format!("larger than {limit} bytes; not loaded"));
                return None;
            }
            Err(BoundedReadError::Io { source, .. }) => {
                self.error(path, format!("cannot read: {source}"));
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
