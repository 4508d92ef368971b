//! Top-level discovery: everything about a node, from one driver root.
//!
//! Discovery runs on the `gpuhook cdi generate` path (and to refresh the hook's inventory cache),
//! so it is lean: the `ld.so.cache` is read and parsed once and shared by NVML location and file
//! discovery, symlinks are resolved through one caching resolver, no subprocess is started.
//! Degraded situations (no NVML, no `/proc/devices` entry, dangling cache entries) are reported
//! as warnings next to a usable inventory; only a node with no driver at all is an error.

use std::path::{Path, PathBuf};

use crate::devnodes::{discover_nodes, NVIDIACTL};
use crate::error::NodeError;
use crate::files::discover_files;
use crate::gpus::{gpus_from_nvml, gpus_from_procfs};
use crate::inventory::{
    join_under, DeviceMajors, DiscoverySource, Inventory, INVENTORY_FORMAT_VERSION, NVIDIA_MAJOR,
};
use crate::ldcache::{LdCache, LibClass};
use crate::nvml::{Nvml, NvmlLocation, STANDARD_LIB_DIRS};
use crate::procfs::{is_version, ProcFs, PROC_VERSION};
use crate::rootfs::RootResolver;

/// The driver root's dynamic linker cache.
pub const LD_SO_CACHE: &str = "/etc/ld.so.cache";

/// What to discover.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscoverOptions {
    /// Root of the driver installation (`/`, or e.g. `/run/nvidia/driver`).
    pub driver_root: PathBuf,
    /// Root under which `/dev/nvidia*` live; defaults to `driver_root`.
    pub dev_root: Option<PathBuf>,
    /// Host path of the NVML library to use instead of the driver root's.
    pub nvml_lib: Option<PathBuf>,
}

impl Default for DiscoverOptions {
    fn default() -> Self {
        DiscoverOptions {
            driver_root: PathBuf::from("/"),
            dev_root: None,
            nvml_lib: None,
        }
    }
}

impl DiscoverOptions {
    /// Options for a driver root, other fields default.
    pub fn for_root(driver_root: impl Into<PathBuf>) -> Self {
        DiscoverOptions {
            driver_root: driver_root.into(),
            ..Default::default()
        }
    }
}

/// The result of discovery: an inventory and what was degraded while making it.
#[derive(Debug, Clone, PartialEq)]
pub struct Discovery {
    pub inventory: Inventory,
    /// Human-readable notes (NVML unavailable, dangling libraries, ...), for logs.
    pub warnings: Vec<String>,
}

/// Discovers the node under `opts.driver_root`.
pub fn discover(opts: &DiscoverOptions) -> Result<Discovery, NodeError> {
    let root = opts.driver_root.as_path();
    let dev_root = opts.dev_root.clone().unwrap_or_else(|| root.to_path_buf());
    let mut warnings = Vec::new();
    let mut resolver = RootResolver::new(root);
    let proc = ProcFs::new(root);

    let cache_path = join_under(root, Path::new(LD_SO_CACHE));
    let cache = match LdCache::load(&cache_path) {
        Ok(c) => Some(c),
        Err(NodeError::Io { error, .. }) if error.kind() == std::io::ErrorKind::NotFound => {
            warnings.push(format!(
                "{} does not exist: searched {} for libraries instead",
                cache_path.display(),
                STANDARD_LIB_DIRS.join(", ")
            ));
            None
        }
        Err(e) => return Err(e),
    };

    let libcuda = find_native_lib(&mut resolver, cache.as_ref(), "libcuda.so.1");
    if !proc.has_driver() && libcuda.is_none() {
        return Err(NodeError::NoDriver {
            root: root.to_path_buf(),
            looked_for: format!(
                "{} and libcuda.so.1 (in {} and {})",
                proc.path("/proc/driver/nvidia").display(),
                cache_path.display(),
                STANDARD_LIB_DIRS.join(", ")
            ),
        });
    }

    let location = match &opts.nvml_lib {
        Some(p) => Ok(NvmlLocation::explicit(p)),
        None => NvmlLocation::find(&mut resolver, cache.as_ref()),
    };
    let nvml = match location.and_then(|l| Nvml::load(&l)) {
        Ok(n) => Some(n),
        Err(e) => {
            warnings.push(format!(
                "NVML unavailable ({e}); full GPUs are taken from /proc/driver/nvidia/gpus, MIG devices \
                 need NVML and are not listed"
            ));
            None
        }
    };

    let driver_version =
        driver_version(nvml.as_ref(), &mut resolver, cache.as_ref(), libcuda, &proc)?;
    let cuda_driver_version = nvml.as_ref().and_then(|n| {
        n.cuda_driver_version()
            .map_err(|e| warnings.push(format!("CUDA driver version unknown: {e}")))
            .ok()
    });

    let majors = match proc.majors()? {
        Some(m) => m,
        None => {
            warnings.push(format!(
                "{} has no `nvidia` character device: assuming major {NVIDIA_MAJOR}; nvidia-uvm and \
                 nvidia-caps majors unknown",
                proc.path("/proc/devices").display()
            ));
            DeviceMajors {
                nvidia: NVIDIA_MAJOR,
                nvidia_uvm: None,
                nvidia_caps: None,
                nvidia_caps_imex_channels: None,
            }
        }
    };

    let (gpus, source) = match &nvml {
        Some(n) => match gpus_from_nvml(n, &proc, &mut warnings) {
            Ok(g) => (g, DiscoverySource::Nvml),
            Err(e) => {
                warnings.push(format!(
                    "listing GPUs with NVML failed ({e}); using /proc/driver/nvidia/gpus"
                ));
                (gpus_from_procfs(&proc)?, DiscoverySource::Procfs)
            }
        },
        None => (gpus_from_procfs(&proc)?, DiscoverySource::Procfs),
    };
    drop(nvml);

    let mig_caps = match proc.mig_minors()?.and_then(|m| m.control()) {
        Some(c) => Some(c),
        None => match (
            proc.capability_minor("mig/config")?,
            proc.capability_minor("mig/monitor")?,
        ) {
            (Some(config_minor), Some(monitor_minor)) => Some(crate::inventory::MigControlCaps {
                config_minor,
                monitor_minor,
            }),
            _ => None,
        },
    };

    let mut files = discover_files(
        &mut resolver,
        cache.as_ref(),
        &driver_version,
        &mut warnings,
    );

    let ctl = join_under(&dev_root, Path::new(NVIDIACTL));
    if std::fs::symlink_metadata(&ctl).is_err() {
        warnings.push(format!(
            "{} does not exist: check --dev-root (or run nvidia-modprobe)",
            ctl.display()
        ));
    }
    files.device_nodes = Some(discover_nodes(&dev_root, &gpus, mig_caps.as_ref()));

    Ok(Discovery {
        inventory: Inventory {
            format_version: INVENTORY_FORMAT_VERSION,
            driver_root: root.to_path_buf(),
            dev_root,
            driver_version,
            cuda_driver_version,
            majors,
            gpus,
            mig_caps,
            files,
            source,
        },
        warnings,
    })
}

/// In-root real path of a native library, through the cache or the standard folders.
fn find_native_lib(
    resolver: &mut RootResolver,
    cache: Option<&LdCache>,
    soname: &str,
) -> Option<PathBuf> {
    let from_cache = cache
        .and_then(|c| c.lookup(soname, LibClass::Native))
        .map(|e| e.path.clone());
    from_cache
        .into_iter()
        .chain(STANDARD_LIB_DIRS.iter().map(|d| Path::new(d).join(soname)))
        .find_map(|p| resolver.resolve(&p).ok())
}

/// NVML's version, else the suffix of libcuda's / libnvidia-ml's real file, else `/proc`.
fn driver_version(
    nvml: Option<&Nvml>,
    resolver: &mut RootResolver,
    cache: Option<&LdCache>,
    libcuda: Option<PathBuf>,
    proc: &ProcFs,
) -> Result<String, NodeError> {
    if let Some(v) = nvml
        .and_then(|n| n.driver_version().ok())
        .filter(|v| !v.is_empty())
    {
        return Ok(v);
    }
    let libnvml = find_native_lib(resolver, cache, "libnvidia-ml.so.1");
    for real in [libcuda, libnvml].into_iter().flatten() {
        let name = real
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if let Some((_, suffix)) = name.split_once(".so.") {
            if is_version(suffix) {
                return Ok(suffix.to_string());
            }
        }
    }
    proc.driver_version()?
        .ok_or_else(|| NodeError::DriverVersionUnknown {
            root: resolver.root().to_path_buf(),
            proc_version: proc.path(PROC_VERSION),
        })
}

#[cfg(test)]
#[path = "discover_tests.rs"]
mod tests;
