//! Top-level discovery: everything about a node, from one driver root.
//!
//! Discovery runs on the `gpuhook cdi generate` path (and to refresh the hook's inventory cache),
//! so it is lean: the `ld.so.cache` is read and parsed once and shared by NVML location and file
//! discovery, symlinks are resolved through one caching resolver, no subprocess is started.
//! Degraded situations (no NVML, no `/proc/devices` entry, dangling cache entries) are reported
//! as warnings next to a usable inventory; only a node with no driver at all is an error.

use std::path::{Path, PathBuf};

use crate::bounded::{read_bounded_string, MAX_PROC_BYTES};
use crate::devnodes::{discover_nodes_and_ctl, NVIDIACTL};
use crate::error::NodeError;
use crate::files::discover_files;
use crate::gpus::{gpus_from_nvml, gpus_from_procfs};
use crate::inventory::{
    join_under, DeviceMajors, DiscoverySource, Gpu, Inventory, MigControlCaps,
    INVENTORY_FORMAT_VERSION, NVIDIA_MAJOR,
};
use crate::ldcache::{LdCache, LibClass};
use crate::nvml::{Nvml, NvmlLocation, STANDARD_LIB_DIRS};
#[cfg(doc)]
use crate::procfs::MigMinors;
use crate::procfs::{is_version, ProcFs, PROC_MIG_MINORS, PROC_VERSION};
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
    let cache = load_ld_cache(&cache_path, &mut warnings)?;
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

    let nvml = load_nvml(opts, &mut resolver, cache.as_ref(), &mut warnings);
    let driver_version =
        driver_version(nvml.as_ref(), &mut resolver, cache.as_ref(), libcuda, &proc)?;
    let cuda_driver_version = nvml.as_ref().and_then(|n| {
        n.cuda_driver_version()
            .map_err(|e| warnings.push(format!("CUDA driver version unknown: {e}")))
            .ok()
    });
    let majors = majors(&proc, &mut warnings)?;
    let (gpus, source) = list_gpus(nvml.as_ref(), &proc, &mut warnings)?;
    drop(nvml);
    let mig_caps = mig_control_caps(&proc)?;

    let mut files = discover_files(
        &mut resolver,
        cache.as_ref(),
        &driver_version,
        &mut warnings,
    );
    let (nodes, has_ctl) = discover_nodes_and_ctl(&dev_root, &gpus, mig_caps.as_ref());
    if !has_ctl {
        warnings.push(format!(
            "{} does not exist: check --dev-root (or run nvidia-modprobe)",
            join_under(&dev_root, Path::new(NVIDIACTL)).display()
        ));
    }
    files.device_nodes = Some(nodes);

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

/// The driver root's `ld.so.cache`; a missing one is a warning (the standard folders are
/// searched instead), a broken one an error.
fn load_ld_cache(path: &Path, warnings: &mut Vec<String>) -> Result<Option<LdCache>, NodeError> {
    match LdCache::load(path) {
        Ok(c) => Ok(Some(c)),
        Err(NodeError::Io { error, .. }) if error.kind() == std::io::ErrorKind::NotFound => {
            warnings.push(format!(
                "{} does not exist: searched {} for libraries instead",
                path.display(),
                STANDARD_LIB_DIRS.join(", ")
            ));
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// NVML from `--nvml-lib` or the driver root; unusable NVML is a warning.
fn load_nvml(
    opts: &DiscoverOptions,
    resolver: &mut RootResolver,
    cache: Option<&LdCache>,
    warnings: &mut Vec<String>,
) -> Option<Nvml> {
    let location = match &opts.nvml_lib {
        Some(p) => Ok(NvmlLocation::explicit(p)),
        None => NvmlLocation::find(resolver, cache),
    };
    match location.and_then(|l| Nvml::load(&l)) {
        Ok(n) => Some(n),
        Err(e) => {
            warnings.push(format!(
                "NVML unavailable ({e}); full GPUs are taken from /proc/driver/nvidia/gpus, MIG devices \
                 need NVML and are not listed"
            ));
            None
        }
    }
}

/// Majors from `/proc/devices`, else the fixed `nvidia` major with a warning.
fn majors(proc: &ProcFs, warnings: &mut Vec<String>) -> Result<DeviceMajors, NodeError> {
    if let Some(m) = proc.majors()? {
        return Ok(m);
    }
    warnings.push(format!(
        "{} has no `nvidia` character device: assuming major {NVIDIA_MAJOR}; nvidia-uvm and \
         nvidia-caps majors unknown",
        proc.path("/proc/devices").display()
    ));
    Ok(DeviceMajors {
        nvidia: NVIDIA_MAJOR,
        nvidia_uvm: None,
        nvidia_caps: None,
        nvidia_caps_imex_channels: None,
    })
}

/// GPUs (and MIG devices) from NVML, else full GPUs from `/proc`.
fn list_gpus(
    nvml: Option<&Nvml>,
    proc: &ProcFs,
    warnings: &mut Vec<String>,
) -> Result<(Vec<Gpu>, DiscoverySource), NodeError> {
    let Some(n) = nvml else {
        return Ok((gpus_from_procfs(proc)?, DiscoverySource::Procfs));
    };
    match gpus_from_nvml(n, proc, warnings) {
        Ok(g) => Ok((g, DiscoverySource::Nvml)),
        Err(e) => {
            warnings.push(format!(
                "listing GPUs with NVML failed ({e}); using /proc/driver/nvidia/gpus"
            ));
            Ok((gpus_from_procfs(proc)?, DiscoverySource::Procfs))
        }
    }
}

/// The MIG `config` and `monitor` capability minors: from `mig-minors`, else from the
/// capability files.
fn mig_control_caps(proc: &ProcFs) -> Result<Option<MigControlCaps>, NodeError> {
    let path = proc.path(PROC_MIG_MINORS);
    let listed = match read_bounded_string(&path, MAX_PROC_BYTES) {
        Ok(text) => control_minors(&text),
        Err(e) if e.io_kind() == Some(std::io::ErrorKind::NotFound) => None,
        Err(e) => return Err(e.into()),
    };
    if listed.is_some() {
        return Ok(listed);
    }
    Ok(
        match (
            proc.capability_minor("mig/config")?,
            proc.capability_minor("mig/monitor")?,
        ) {
            (Some(config_minor), Some(monitor_minor)) => Some(MigControlCaps {
                config_minor,
                monitor_minor,
            }),
            _ => None,
        },
    )
}

/// [`MigMinors::control`] of `mig-minors` text without parsing the whole file: the driver lists
/// `config` and `monitor` first, ahead of a thousand GPU-instance lines (8 GPUs, MIG or not) that
/// cost more to parse than the rest of discovery. Same rules as [`MigMinors::parse`]: a line is
/// two words, a minor that is not a number is skipped, the first line of a name wins.
fn control_minors(text: &str) -> Option<MigControlCaps> {
    let (mut config, mut monitor) = (None, None);
    for line in text.lines() {
        let mut words = line.split_ascii_whitespace();
        let (Some(name), Some(minor), None) = (words.next(), words.next(), words.next()) else {
            continue;
        };
        let slot = match name {
            "config" => &mut config,
            "monitor" => &mut monitor,
            _ => continue,
        };
        if slot.is_none() {
            *slot = minor.parse::<u32>().ok();
        }
        if let (Some(config_minor), Some(monitor_minor)) = (config, monitor) {
            return Some(MigControlCaps {
                config_minor,
                monitor_minor,
            });
        }
    }
    None
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
