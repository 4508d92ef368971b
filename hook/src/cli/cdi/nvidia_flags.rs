//! The flags of `nvidia-ctk cdi generate` that gpuhook has no flag of its own for.
//!
//! An admin switching from NVIDIA's toolkit keeps the command lines and `NVIDIA_CTK_*`
//! environment of their units: every flag NVIDIA defines (nvidia-container-toolkit v1.20.0
//! cmd/nvidia-ctk/cdi/generate/generate.go `build`) is accepted with its meaning, or refused with
//! a message naming gpuhook's equivalent. The flags gpuhook shares (`--driver-root`, `--output`,
//! `--vendor`, ...) live in [`super::GenerateArgs`] with NVIDIA's aliases and env names.

use std::collections::BTreeSet;
use std::path::PathBuf;

use clap::Args;
use gpuhook_cdi::edits::HOOK_NAMES;
use gpuhook_cdi::Mode;

/// `nvidia-ctk cdi generate` flags (see the module doc).
#[derive(Debug, Clone, Default, Args)]
pub struct NvidiaFlags {
    /// Spec to generate: auto or nvml (per-GPU devices), management (one `all` device with
    /// every GPU, control and capability node, for monitoring containers), gds, mofed,
    /// nvswitch, gdrcopy, imex (where the node has those devices)
    #[arg(
        long,
        alias = "discovery-mode",
        env = "NVIDIA_CTK_CDI_GENERATE_MODE",
        default_value = "auto",
        value_name = "MODE"
    )]
    pub mode: String,
    /// Don't generate an `all` device
    #[arg(long, env = "NVIDIA_CTK_CDI_GENERATE_NO_ALL_DEVICE")]
    pub no_all_device: bool,
    /// Restrict the spec to these devices (index, N:M, UUID; `all`)
    #[arg(long = "device-id", visible_aliases = ["device-ids", "device", "devices"], env = "NVIDIA_CTK_CDI_GENERATE_DEVICE_IDS", value_delimiter = ',', value_name = "ID")]
    pub device_ids: Vec<String>,
    /// Leave a hook step out: create-symlinks, update-ldcache, disable-device-node-modification,
    /// enable-cuda-compat, update-application-profile, chmod, or all (no hook)
    #[arg(
        long = "disable-hook",
        visible_alias = "disable-hooks",
        env = "NVIDIA_CTK_CDI_GENERATE_DISABLED_HOOKS",
        value_delimiter = ',',
        value_name = "HOOK"
    )]
    pub disable_hooks: Vec<String>,
    /// Keep a hook step even if disabled
    #[arg(
        long = "enable-hook",
        visible_alias = "enable-hooks",
        env = "NVIDIA_CTK_CDI_GENERATE_ENABLED_HOOKS",
        value_delimiter = ',',
        value_name = "HOOK"
    )]
    pub enable_hooks: Vec<String>,
    /// NVIDIA feature flags (disable-ipc-discoverer, no-additional-gids-for-device-nodes, ...)
    #[arg(
        long = "feature-flag",
        visible_alias = "feature-flags",
        env = "NVIDIA_CTK_CDI_GENERATE_FEATURE_FLAGS",
        value_delimiter = ',',
        value_name = "FLAG"
    )]
    pub feature_flags: Vec<String>,
    /// NVIDIA's hook binary; gpuhook's specs run gpuhook (see --gpuhook-path)
    #[arg(
        long,
        visible_alias = "nvidia-ctk-path",
        env = "NVIDIA_CTK_CDI_HOOK_PATH",
        value_name = "PATH"
    )]
    pub nvidia_cdi_hook_path: Option<PathBuf>,
    /// NVIDIA: config file search path (refused: see the message)
    #[arg(
        long = "config-search-path",
        env = "NVIDIA_CTK_CDI_GENERATE_CONFIG_SEARCH_PATHS",
        value_delimiter = ',',
        value_name = "DIR"
    )]
    pub config_search_paths: Vec<PathBuf>,
    /// NVIDIA: library search path of CSV mode (no effect here, as in NVIDIA's nvml mode)
    #[arg(
        long = "library-search-path",
        env = "NVIDIA_CTK_CDI_GENERATE_LIBRARY_SEARCH_PATHS",
        value_delimiter = ',',
        value_name = "DIR"
    )]
    pub library_search_paths: Vec<PathBuf>,
    /// NVIDIA: CSV mode (Tegra) files (refused)
    #[arg(
        long = "csv.file",
        env = "NVIDIA_CTK_CDI_GENERATE_CSV_FILES",
        value_delimiter = ',',
        value_name = "FILE"
    )]
    pub csv_files: Vec<PathBuf>,
    /// NVIDIA: CSV mode (Tegra) ignore patterns (refused)
    #[arg(
        long = "csv.ignore-pattern",
        env = "NVIDIA_CTK_CDI_GENERATE_CSV_IGNORE_PATTERNS",
        value_delimiter = ',',
        value_name = "PATTERN"
    )]
    pub csv_ignore_patterns: Vec<String>,
    /// NVIDIA: CSV mode (Tegra) compat container root (refused)
    #[arg(
        long = "csv.compat-container-root",
        env = "NVIDIA_CTK_CDI_GENERATE_CSV_CONTAINER_COMPAT_ROOT",
        value_name = "DIR"
    )]
    pub csv_compat_container_root: Option<PathBuf>,
}

/// What the flags ask for, once checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// `None`: the per-GPU spec (modes auto and nvml).
    pub mode: Option<Mode>,
    pub all_device: bool,
    pub device_ids: Option<Vec<String>>,
    pub disabled_hooks: BTreeSet<String>,
    /// `disable-ipc-discoverer`: no IPC socket mounts.
    pub no_ipc: bool,
    /// From `--nvidia-cdi-hook-path` naming a gpuhook binary.
    pub gpuhook_path: Option<PathBuf>,
}

/// A flag of NVIDIA's that gpuhook refuses; each message names what to do instead.
#[derive(Debug, thiserror::Error)]
pub enum FlagsError {
    #[error(
        "--mode {value}: gpuhook supports discrete GPUs through NVML only (--mode nvml); Tegra \
         (csv) and WSL specs come from NVIDIA's nvidia-ctk"
    )]
    UnsupportedMode { value: String },
    /// `value` is already capped.
    #[error(
        "invalid discovery mode {value:?}: use auto, nvml, management, gds, mofed, nvswitch, \
         gdrcopy or imex"
    )]
    InvalidMode { value: String },
    /// `name` is already capped.
    #[error("unknown hook {name:?}: use {}", HOOK_NAMES.join(", "))]
    UnknownHook { name: String },
    #[error("--enable-hook all: enabling all hooks is not supported (as in nvidia-ctk)")]
    EnableAllHooks,
    #[error(
        "--enable-hook {hook}: gpuhook's setup hook has no {hook} step (chmod was a workaround for \
         old crun; device nodes carry their mode in the spec instead)"
    )]
    NoSuchStep { hook: String },
    #[error("--feature-flag {flag} is not supported by gpuhook; leave it out")]
    UnsupportedFeature { flag: String },
    #[error(
        "--config-search-path is not supported: gpuhook finds the driver's config files \
         (Vulkan/EGL/OpenCL ICDs) at their standard places under --driver-root; point \
         --driver-root at the driver installation instead"
    )]
    ConfigSearchPath,
    #[error("--csv.* flags belong to CSV (Tegra) mode, which gpuhook does not support")]
    Csv,
    #[error(
        "--nvidia-cdi-hook-path {}: gpuhook's specs run gpuhook's own setup hook, not \
         NVIDIA's; pass --gpuhook-path with the absolute path of the gpuhook binary",
        path.display()
    )]
    NvidiaHookPath { path: PathBuf },
    #[error(
        "--device-id none would give a spec without devices, which CDI runtimes reject; \
         leave the spec out instead"
    )]
    DeviceIdNone,
}

/// NVIDIA's feature flags that do not change a gpuhook spec, and why.
const NEUTRAL_FEATURES: &[(&str, &str)] = &[
    (
        "disable-nvsandboxutils",
        "gpuhook never uses nvsandboxutils",
    ),
    (
        "no-additional-gids-for-device-nodes",
        "gpuhook never emits additionalGids",
    ),
    ("disable-multiple-csv-devices", "CSV mode only"),
];

fn mode(value: &str) -> Result<Option<Mode>, FlagsError> {
    Ok(Some(match value.to_ascii_lowercase().as_str() {
        "auto" | "nvml" => return Ok(None),
        "management" => Mode::Management,
        "gds" => Mode::Gds,
        "mofed" => Mode::Mofed,
        "nvswitch" => Mode::Nvswitch,
        "gdrcopy" => Mode::Gdrcopy,
        "imex" => Mode::Imex,
        "csv" | "wsl" => {
            return Err(FlagsError::UnsupportedMode {
                value: value.to_string(),
            })
        }
        _ => {
            return Err(FlagsError::InvalidMode {
                value: gpuhook_cdi::error::capped(value),
            })
        }
    }))
}

fn hooks(disable: &[String], enable: &[String]) -> Result<BTreeSet<String>, FlagsError> {
    for h in disable.iter().chain(enable) {
        if !HOOK_NAMES.contains(&h.as_str()) {
            return Err(FlagsError::UnknownHook {
                name: gpuhook_cdi::error::capped(h),
            });
        }
    }
    if enable.iter().any(|h| h == "all") {
        return Err(FlagsError::EnableAllHooks);
    }
    if let Some(h) = enable
        .iter()
        .find(|h| *h == "chmod" || *h == "update-application-profile")
    {
        return Err(FlagsError::NoSuchStep { hook: h.clone() });
    }
    Ok(disable
        .iter()
        .filter(|h| !enable.contains(h))
        .cloned()
        .collect())
}

fn features(flags: &[String]) -> Result<bool, FlagsError> {
    let mut no_ipc = false;
    for f in flags {
        match f.as_str() {
            "disable-ipc-discoverer" => no_ipc = true,
            "enable-explicit-driver-libraries" | "enable-coherent-annotations" => {
                return Err(FlagsError::UnsupportedFeature { flag: f.clone() })
            }
            other => match NEUTRAL_FEATURES.iter().find(|(n, _)| *n == other) {
                Some((_, why)) => tracing::info!(flag = other, "feature flag has no effect: {why}"),
                None => {
                    tracing::warn!(flag = %gpuhook_cdi::error::capped(other), "unknown feature flag ignored (as nvidia-ctk does)")
                }
            },
        }
    }
    Ok(no_ipc)
}

impl NvidiaFlags {
    /// Checks the flags; refuses those gpuhook cannot honour, naming the way to do it here.
    pub fn resolve(&self) -> Result<Resolved, FlagsError> {
        if !self.config_search_paths.is_empty() {
            return Err(FlagsError::ConfigSearchPath);
        }
        if !self.csv_files.is_empty()
            || !self.csv_ignore_patterns.is_empty()
            || self.csv_compat_container_root.is_some()
        {
            return Err(FlagsError::Csv);
        }
        if !self.library_search_paths.is_empty() {
            tracing::warn!(
                "--library-search-path applies to CSV mode only (as in nvidia-ctk); ignored"
            );
        }
        let gpuhook_path = match &self.nvidia_cdi_hook_path {
            Some(p) if p.file_name() == Some("gpuhook".as_ref()) => Some(p.clone()),
            Some(p) => return Err(FlagsError::NvidiaHookPath { path: p.clone() }),
            None => None,
        };
        let ids: Vec<String> = self
            .device_ids
            .iter()
            .map(|s| s.trim().to_string())
            .collect();
        if ids.iter().any(|i| i == "none") {
            return Err(FlagsError::DeviceIdNone);
        }
        Ok(Resolved {
            mode: mode(&self.mode)?,
            all_device: !self.no_all_device,
            device_ids: (!ids.is_empty() && !ids.iter().any(|i| i == "all")).then_some(ids),
            disabled_hooks: hooks(&self.disable_hooks, &self.enable_hooks)?,
            no_ipc: features(&self.feature_flags)?,
            gpuhook_path,
        })
    }
}

#[cfg(test)]
#[path = "nvidia_flags_tests.rs"]
mod tests;
