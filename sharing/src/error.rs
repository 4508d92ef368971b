//! Why a config (or a config set) cannot be used: each error names the file, the key and the
//! value, so an admin can fix the ConfigMap without reading our source.

use std::path::PathBuf;

use gpuhook_node::bounded::{cap_message, preview};

/// Errors reading, parsing or selecting a device-plugin config.
///
/// The I/O cause of [`ConfigError::Read`] is part of its message, in a field named `error` and
/// deliberately not a `#[source]`: printed alone or as an `anyhow` chain (`{:#}`), it appears once.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {error}")]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("config file {path}: {key}: {message}")]
    Parse {
        path: PathBuf,
        key: String,
        message: String,
    },
    /// A value that parsed but makes no sense (names the key and the fix).
    #[error("{key}: {message}")]
    Invalid { key: String, message: String },
    #[error("config directory {path} holds no config file; add one file per named config (as a ConfigMap mounted as a volume has)")]
    EmptySet { path: PathBuf },
    #[error("config directory {path} holds more than {max} entries; refusing to read it")]
    TooManyConfigs { path: PathBuf, max: usize },
    #[error("{via}{name}: no config of that name in {path} (available: {available}); fix the {what} or add the config", what = if via.starts_with("node") { "label" } else { "default" })]
    UnknownConfig {
        /// How the name was chosen: [`LABEL_VIA`] or [`DEFAULT_VIA`].
        via: &'static str,
        name: String,
        path: PathBuf,
        available: String,
    },
    #[error("no config selected for this node in {path}: no nvidia.com/device-plugin.config label, no default config, no config named \"default\" and more than one config (available: {available}); label the node or add a config named default")]
    NoDefault { path: PathBuf, available: String },
}

/// [`ConfigError::UnknownConfig`]: the name came from the node's label.
pub const LABEL_VIA: &str = "node label nvidia.com/device-plugin.config=";
/// [`ConfigError::UnknownConfig`]: the name is the set's default config.
pub const DEFAULT_VIA: &str = "default config ";

impl ConfigError {
    /// Key and message are capped: parsers quote the (ConfigMap author's) value whole.
    pub fn invalid(key: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError::Invalid {
            key: preview(&key.into()),
            message: cap_message(&message.into()),
        }
    }

    /// An [`ConfigError::Invalid`] made a [`ConfigError::Parse`] naming `path`.
    pub fn in_file(self, path: &std::path::Path) -> Self {
        match self {
            ConfigError::Invalid { key, message } => ConfigError::Parse {
                path: path.to_path_buf(),
                key,
                message,
            },
            other => other,
        }
    }
}

/// Characters of a quoted config value kept in a message.
pub const ECHO_MAX: usize = 200;

/// `s` cut to `max` characters, with the number of characters left out.
pub fn clip(s: &str, max: usize) -> String {
    let n = s.chars().count();
    if n <= max {
        return s.to_string();
    }
    let head: String = s.chars().take(max).collect();
    format!("{head}... ({} more characters)", n - max)
}
