//! Named configs: one file, or a directory with one file per named config (a ConfigMap mounted
//! as a volume), and the choice of the node's config by its `nvidia.com/device-plugin.config`
//! label.
//!
//! The choice follows NVIDIA's config-manager (`cmd/config-manager/main.go:updateConfigName` and
//! `getConfigFileNameMap`, k8s-device-plugin v0.17–v0.20): the files are the directory's
//! entries that are not directories and do not start with `..` (the ConfigMap volume's own
//! `..data` links); a label value must name one of them (`specified config X does not exist`);
//! without a label the explicit default config is used (it must exist), and without one the
//! fallback strategies run in order: `named` takes the config called `default`, `single` the
//! only config when there is just one, `empty` the empty config. The helm chart's defaults are no
//! default config and `["named", "single"]` (`deployments/helm/nvidia-device-plugin/values.yaml`
//! `config.fallbackStrategies`). An empty label value counts as no label (the informer reads
//! `Labels[key]`). A single file given directly is NVIDIA's plain `--config-file`: the label does
//! not choose among one.
//!
//! Each config is checked on load; a broken one is kept as its error, so a node selecting another
//! config still starts, and a node selecting it gets the error naming file, key and value.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::config::{self, Config};
use crate::error::{ConfigError, DEFAULT_VIA, LABEL_VIA};

/// Most entries read from a config directory.
pub const MAX_CONFIGS: usize = 1024;

/// The node label that selects a named config.
pub const CONFIG_LABEL: &str = "nvidia.com/device-plugin.config";

/// What to do when the node has no label (`--fallback-strategies` of the config-manager).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fallback {
    /// The config named `default`.
    Named,
    /// The only config, when there is exactly one.
    Single,
    /// The empty config (all defaults).
    Empty,
}

/// Name of the config the `named` fallback looks for.
pub const NAMED_FALLBACK: &str = "default";

/// The configs of a file or a directory, by name.
#[derive(Debug, Clone)]
pub struct ConfigSet {
    path: PathBuf,
    /// A single file: the label does not choose.
    single_file: bool,
    entries: BTreeMap<String, Entry>,
    default_config: Option<String>,
    fallbacks: Vec<Fallback>,
    empty: Config,
}

#[derive(Debug, Clone)]
struct Entry {
    path: PathBuf,
    config: Result<Config, (String, String)>,
}

/// Reads `path`: a config file (one config, named by its file name) or a directory of them.
pub fn load_config_set(path: &Path) -> Result<ConfigSet, ConfigError> {
    let meta = std::fs::metadata(path).map_err(|error| ConfigError::Read {
        path: path.to_path_buf(),
        error,
    })?;
    let mut set = ConfigSet {
        path: path.to_path_buf(),
        single_file: !meta.is_dir(),
        entries: BTreeMap::new(),
        default_config: None,
        fallbacks: vec![Fallback::Named, Fallback::Single],
        empty: Config::default(),
    };
    if set.single_file {
        // One file is read as NVIDIA's plugin reads `--config-file`: its errors are the set's.
        let config = config::load(path)?;
        let name = path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        let entry = Entry {
            path: path.to_path_buf(),
            config: Ok(config),
        };
        set.entries.insert(name, entry);
        return Ok(set);
    }
    for (name, file) in config_files(path)? {
        // Kept as key and message; `select` names the file once.
        let config = config::load(&file).map_err(|e| match e {
            ConfigError::Parse { key, message, .. } => (key, message),
            ConfigError::Read { error, .. } => ("(file)".to_string(), error.to_string()),
            other => ("(file)".to_string(), other.to_string()),
        });
        set.entries.insert(name, Entry { path: file, config });
    }
    if set.entries.is_empty() {
        return Err(ConfigError::EmptySet {
            path: path.to_path_buf(),
        });
    }
    Ok(set)
}

/// `getConfigFileNameMap`: entries that are not directories and do not start with `..`.
fn config_files(dir: &Path) -> Result<Vec<(String, PathBuf)>, ConfigError> {
    let read_err = |error| ConfigError::Read {
        path: dir.to_path_buf(),
        error,
    };
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(read_err)? {
        let entry = entry.map_err(read_err)?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("..") || entry.file_type().map_err(read_err)?.is_dir() {
            continue;
        }
        if out.len() == MAX_CONFIGS {
            return Err(ConfigError::TooManyConfigs {
                path: dir.to_path_buf(),
                max: MAX_CONFIGS,
            });
        }
        out.push((name, entry.path()));
    }
    Ok(out)
}

impl ConfigSet {
    /// Uses `name` when the node has no label (the config-manager's `--default-config`).
    pub fn with_default_config(mut self, name: Option<String>) -> Self {
        self.default_config = name.filter(|n| !n.is_empty());
        self
    }

    /// Replaces the fallback strategies (default: named, then single).
    pub fn with_fallbacks(mut self, fallbacks: Vec<Fallback>) -> Self {
        self.fallbacks = fallbacks;
        self
    }

    /// Where the set was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The config names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    /// Every config that failed to load, as the error a node selecting it would get.
    pub fn errors(&self) -> Vec<ConfigError> {
        self.entries
            .keys()
            .filter_map(|name| self.config_named(name, DEFAULT_VIA).err())
            .collect()
    }

    /// The node's config: by its `nvidia.com/device-plugin.config` label value, else by the
    /// default and the fallbacks (see the module doc). The empty fallback's name is `""`.
    pub fn select(&self, node_label: Option<&str>) -> Result<(&str, &Config), ConfigError> {
        if self.single_file {
            let (name, _) = self
                .entries
                .iter()
                .next()
                .ok_or_else(|| self.no_default())?;
            if let Some(label) = node_label.filter(|l| !l.is_empty() && *l != name.as_str()) {
                tracing::debug!(label, file = %self.path.display(), "one config file: the node label does not choose");
            }
            return self.config_named(name, DEFAULT_VIA);
        }
        if let Some(label) = node_label.filter(|l| !l.is_empty()) {
            return self.config_named(label, LABEL_VIA);
        }
        if let Some(default) = &self.default_config {
            return self.config_named(default, DEFAULT_VIA);
        }
        for fallback in &self.fallbacks {
            match fallback {
                Fallback::Named if self.entries.contains_key(NAMED_FALLBACK) => {
                    return self.config_named(NAMED_FALLBACK, DEFAULT_VIA)
                }
                Fallback::Single if self.entries.len() == 1 => {
                    let name = self.entries.keys().next().map_or("", String::as_str);
                    return self.config_named(name, DEFAULT_VIA);
                }
                Fallback::Empty => return Ok(("", &self.empty)),
                _ => {}
            }
        }
        Err(self.no_default())
    }

    fn available(&self) -> String {
        let names: Vec<&str> = self.names().collect();
        gpuhook_node::bounded::preview_list(&names, 20)
    }

    fn no_default(&self) -> ConfigError {
        ConfigError::NoDefault {
            path: self.path.clone(),
            available: self.available(),
        }
    }

    fn config_named(&self, name: &str, via: &'static str) -> Result<(&str, &Config), ConfigError> {
        let Some((key, entry)) = self.entries.get_key_value(name) else {
            return Err(ConfigError::UnknownConfig {
                via,
                name: gpuhook_node::bounded::preview(name),
                path: self.path.clone(),
                available: self.available(),
            });
        };
        match &entry.config {
            Ok(c) => Ok((key.as_str(), c)),
            Err((k, message)) => Err(ConfigError::Parse {
                path: entry.path.clone(),
                key: k.clone(),
                message: message.clone(),
            }),
        }
    }
}

#[cfg(test)]
#[path = "set_tests.rs"]
mod tests;
