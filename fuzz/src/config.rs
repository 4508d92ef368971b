//! `/etc/gpuhook/config.toml`, the node admin's settings, read by every hook and wrapper run.

use std::path::Path;

use gpuhook::config::{Config, ConfigError};

use crate::{check_message, text};

/// The config text: errors are bounded and point inside the file; an accepted config has
/// absolute paths, at least one capability and runtime, and its request policy says what the
/// file says.
pub fn hook_config(data: &[u8]) {
    let toml = text(data);
    let path = Path::new("/etc/gpuhook/config.toml");
    let config = match Config::from_toml(&toml, path) {
        Ok(config) => config,
        Err(e) => {
            check_message("Config::from_toml", &e);
            let lines = toml.split('\n').count();
            match e {
                ConfigError::Parse { line, column, .. } => {
                    assert!((1..=lines).contains(&line), "line {line} of {lines}");
                    assert!(column >= 1, "column {column}");
                }
                ConfigError::Invalid { line: Some(l), .. } => {
                    assert!((1..=lines).contains(&l), "line {l} of {lines}");
                }
                _ => {}
            }
            return;
        }
    };
    assert!(config.driver_root.is_absolute());
    assert!(config.dev_root().is_absolute());
    assert!(config.inventory_cache.is_absolute());
    assert!(config.cdi_spec_dirs.iter().all(|d| d.is_absolute()));
    assert!(!config.runtime.runtimes.is_empty());
    let policy = config.request_policy();
    assert_eq!(
        policy.supported_capabilities,
        config.supported_capabilities.iter().copied().collect(),
    );
    assert!(!policy.supported_capabilities.is_empty());
    assert_eq!(
        policy.accept_envvar_when_unprivileged,
        config.accept_envvar_when_unprivileged
    );
    assert_eq!(
        policy.accept_device_list_as_volume_mounts,
        config.accept_device_list_as_volume_mounts
    );
}
