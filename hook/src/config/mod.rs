//! `/etc/gpuhook/config.toml`: the node administrator's settings.
//!
//! Unknown keys are errors (a typo in a security setting such as
//! `accept-envvar-when-unprivileged` must not silently fall back to the default), and every error
//! names the file, line and key. A missing *default* file means defaults; a file named explicitly
//! (`--config`, `GPUHOOK_CONFIG`) must exist. Every key is documented in `config.toml.example`.

mod errors;
pub mod nvidia;

use std::path::{Path, PathBuf};

use gpuhook_node::bounded::{read_bounded_string, MAX_CONFIG_FILE_BYTES};
use gpuhook_node::Capability;
use serde::Deserialize;

pub use errors::ConfigError;

use crate::logging::{LogFormat, LogLevel, LogSettings};
use crate::request::RequestPolicy;

/// Where the config is read from when none is named.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/gpuhook/config.toml";
/// Environment variable naming the config file.
pub const CONFIG_ENV: &str = "GPUHOOK_CONFIG";
/// Default `ldconfig`: Debian's real binary on the host (`@` = host path).
pub const DEFAULT_LDCONFIG: &str = "@/sbin/ldconfig.real";
/// Fallback when [`DEFAULT_LDCONFIG`] does not exist.
pub const FALLBACK_LDCONFIG: &str = "/sbin/ldconfig";

/// The whole config file.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct Config {
    /// Root of the driver installation (`/`, or e.g. `/run/nvidia/driver`).
    pub driver_root: PathBuf,
    /// Root of `/dev/nvidia*`; defaults to `driver_root`.
    pub dev_root: Option<PathBuf>,
    /// Honour `NVIDIA_VISIBLE_DEVICES` from unprivileged containers.
    pub accept_envvar_when_unprivileged: bool,
    /// Read device lists from `/dev/null` mounts under `/var/run/nvidia-container-devices/`.
    pub accept_device_list_as_volume_mounts: bool,
    /// CDI devices (qualified-name globs) a pod annotation may request; empty: none (only
    /// container annotations, set by a device plugin, are grants).
    pub allow_cdi_devices_from_pod_annotations: Vec<String>,
    /// Capabilities offered to containers.
    pub supported_capabilities: Vec<Capability>,
    /// Host ldconfig (`@/path` = host path; `/path` = inside `driver_root`).
    pub ldconfig: String,
    /// Where discovery results are cached for the container start path.
    pub inventory_cache: PathBuf,
    /// CDI spec directories, lowest priority first.
    pub cdi_spec_dirs: Vec<PathBuf>,
    /// Log file (appended); stderr when unset. Never stdout.
    pub log_file: Option<PathBuf>,
    pub log_level: LogLevel,
    pub log_format: LogFormat,
    pub runtime: RuntimeConfig,
    /// Keys of an NVIDIA config file gpuhook ignored ([`nvidia`]); logged by [`Config::log_warnings`].
    #[serde(skip)]
    pub warnings: Vec<String>,
}

/// `[runtime]`: the containerd runtime wrapper.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct RuntimeConfig {
    /// Low-level runtimes to exec, first found on PATH wins (names or absolute paths).
    pub runtimes: Vec<String>,
    pub mode: RuntimeMode,
    /// In `cdi` mode, generate missing CDI specs from discovery instead of failing.
    pub generate_missing: bool,
    /// For `create`, do our `hook setup` hook's work in the wrapper, beside runc.
    pub early_setup: bool,
    /// The DRA plugin's claim index (containerd 1.6: a claim's CDI IDs per pod and container).
    pub claim_index_dir: PathBuf,
}

/// Default [`RuntimeConfig::claim_index_dir`]: gpuhook-dra-plugin's `<plugin dir>/pods`.
pub const DEFAULT_CLAIM_INDEX_DIR: &str = "/var/lib/kubelet/plugins/gpu.nvidia.com/pods";

/// How the runtime wrapper injects devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RuntimeMode {
    /// Insert the `gpuhook prestart` hook.
    Legacy,
    /// Turn requests into CDI names and apply the specs from `cdi-spec-dirs`.
    Cdi,
    /// Generate the CDI edits in memory from discovery.
    JitCdi,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            driver_root: PathBuf::from("/"),
            dev_root: None,
            accept_envvar_when_unprivileged: true,
            accept_device_list_as_volume_mounts: false,
            allow_cdi_devices_from_pod_annotations: Vec::new(),
            supported_capabilities: Capability::ALL.to_vec(),
            ldconfig: DEFAULT_LDCONFIG.to_string(),
            inventory_cache: PathBuf::from("/var/run/gpuhook/inventory.json"),
            cdi_spec_dirs: vec![PathBuf::from("/etc/cdi"), PathBuf::from("/var/run/cdi")],
            log_file: None,
            log_level: LogLevel::default(),
            log_format: LogFormat::default(),
            runtime: RuntimeConfig::default(),
            warnings: Vec::new(),
        }
    }
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            runtimes: vec!["runc".into(), "crun".into()],
            mode: RuntimeMode::Cdi,
            generate_missing: true,
            early_setup: true,
            claim_index_dir: PathBuf::from(DEFAULT_CLAIM_INDEX_DIR),
        }
    }
}

impl Config {
    /// Loads the config: `path` when named explicitly (must exist), else [`DEFAULT_CONFIG_PATH`]
    /// (missing = defaults).
    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        let (path, explicit) = match path {
            Some(p) => (p, true),
            None => (Path::new(DEFAULT_CONFIG_PATH), false),
        };
        let not_found = Some(std::io::ErrorKind::NotFound);
        match read_bounded_string(path, MAX_CONFIG_FILE_BYTES) {
            Ok(text) => Config::from_toml(&text, path),
            Err(e) if e.io_kind() == not_found && !explicit => Ok(Config::default()),
            Err(e) if e.io_kind() == not_found => Err(ConfigError::Missing {
                path: path.to_path_buf(),
            }),
            Err(e) => Err(ConfigError::Read(e)),
        }
    }

    /// Parses and validates config text; `path` is only used in messages.
    pub fn from_toml(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let parse_error = |e: toml::de::Error| errors::parse_error(&e, text, path);
        // The substring test keeps gpuhook's own file at one parse (the container start path).
        let nvidia_doc = if nvidia::may_be_nvidia(text) {
            Some(toml::from_str::<toml::Table>(text).map_err(parse_error)?)
                .filter(nvidia::is_nvidia)
        } else {
            None
        };
        let config = match nvidia_doc {
            Some(doc) => Config::from_nvidia(doc, text, path)?,
            None => toml::from_str(text).map_err(parse_error)?,
        };
        config
            .validate()
            .map_err(|(key, message)| errors::invalid(text, path, key, message))?;
        Ok(config)
    }

    /// NVIDIA's config file (see [`nvidia`]), translated into gpuhook's keys.
    fn from_nvidia(doc: toml::Table, text: &str, path: &Path) -> Result<Config, ConfigError> {
        let (table, warnings) = nvidia::translate(doc)
            .map_err(|(key, message)| errors::invalid(text, path, &key, message))?;
        let mut config: Config = toml::Table::try_into(table).map_err(|e| {
            let key = errors::key_in_message(e.message()).unwrap_or_default();
            errors::invalid(text, path, &key, e.message().trim().to_string())
        })?;
        config.warnings = warnings;
        Ok(config)
    }

    /// Logs the warnings of loading (call once logging is set up).
    pub fn log_warnings(&self) {
        for w in &self.warnings {
            tracing::warn!(warning = %w, "config");
        }
    }

    /// Checks what serde cannot: absolute paths, non-empty lists.
    fn validate(&self) -> Result<(), (&'static str, String)> {
        let absolute = |key: &'static str, p: &Path| {
            if p.is_absolute() {
                Ok(())
            } else {
                Err((key, format!("{} is not an absolute path", p.display())))
            }
        };
        absolute("driver-root", &self.driver_root)?;
        if let Some(d) = &self.dev_root {
            absolute("dev-root", d)?;
        }
        absolute("inventory-cache", &self.inventory_cache)?;
        for d in &self.cdi_spec_dirs {
            absolute("cdi-spec-dirs", d)?;
        }
        if let Some(f) = &self.log_file {
            absolute("log-file", f)?;
        }
        if !(self.ldconfig.starts_with("@/") || self.ldconfig.starts_with('/')) {
            return Err((
                "ldconfig",
                format!(
                    "{:?} must be @/host/path or /path/in/driver-root",
                    self.ldconfig
                ),
            ));
        }
        for p in &self.allow_cdi_devices_from_pod_annotations {
            let shaped = p
                .split_once('=')
                .is_some_and(|(kind, name)| kind.contains('/') && !name.is_empty());
            if !shaped {
                return Err((
                    "allow-cdi-devices-from-pod-annotations",
                    format!(
                        "{p:?} is not a qualified CDI name glob such as \"nvidia.com/gpu-mps=*\""
                    ),
                ));
            }
        }
        if self.supported_capabilities.is_empty() {
            return Err((
                "supported-capabilities",
                "is empty: list at least one capability".into(),
            ));
        }
        if self.runtime.runtimes.is_empty() || self.runtime.runtimes.iter().any(|r| r.is_empty()) {
            return Err((
                "runtime.runtimes",
                "must list at least one runtime name or path, e.g. [\"runc\"]".into(),
            ));
        }
        Ok(())
    }

    /// Root of `/dev/nvidia*` on the host.
    pub fn dev_root(&self) -> &Path {
        self.dev_root.as_deref().unwrap_or(&self.driver_root)
    }

    /// The request policy these settings imply.
    pub fn request_policy(&self) -> RequestPolicy {
        RequestPolicy {
            accept_envvar_when_unprivileged: self.accept_envvar_when_unprivileged,
            accept_device_list_as_volume_mounts: self.accept_device_list_as_volume_mounts,
            supported_capabilities: self.supported_capabilities.iter().copied().collect(),
            pod_cdi_allow: self.allow_cdi_devices_from_pod_annotations.clone(),
            ..RequestPolicy::default()
        }
    }

    /// The logging settings.
    pub fn log_settings(&self) -> LogSettings {
        LogSettings {
            file: self.log_file.clone(),
            level: self.log_level,
            format: self.log_format,
        }
    }

    /// The host path of ldconfig: `@/p` → `/p`; `/p` → `driver_root/p`. The default falls back to
    /// [`FALLBACK_LDCONFIG`] when `/sbin/ldconfig.real` does not exist (`exists` decides).
    pub fn ldconfig_path(&self, exists: impl Fn(&Path) -> bool) -> PathBuf {
        let path = match self.ldconfig.strip_prefix('@') {
            Some(host) => PathBuf::from(host),
            None => gpuhook_node::join_under(&self.driver_root, Path::new(&self.ldconfig)),
        };
        if self.ldconfig == DEFAULT_LDCONFIG && !exists(&path) {
            return PathBuf::from(FALLBACK_LDCONFIG);
        }
        path
    }
}

#[cfg(test)]
mod tests;
