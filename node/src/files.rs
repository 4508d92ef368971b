//! Driver files by capability: libraries, binaries, firmware, IPC sockets, config files and the
//! symlinks a container needs.
//!
//! Libraries are found like libnvidia-container finds them: by matching the driver root's
//! `ld.so.cache` keys against per-capability prefixes, resolving each entry inside the root and
//! keeping only files of *this* driver version (a stale `libcuda.so.535.x` left by an upgrade
//! must not be injected next to a 570 kernel module). Everything else is a short list of
//! well-known paths checked for existence, so discovery costs a handful of syscalls.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use crate::extras::{extra_configs, extra_links, xorg_modules, OWN_VERSION_PREFIXES};
use crate::inventory::{Capability, ContainerSymlink, DriverFile, DriverFiles, DriverLibrary};
use crate::ldcache::{LdCache, LibClass};
use crate::nvml::STANDARD_LIB_DIRS;
use crate::rootfs::RootResolver;

pub use crate::library_names::{classify, LIBRARIES};

#[path = "files_resolve.rs"]
mod resolve;
use resolve::LibResolver;

/// Binaries by capability.
pub const BINARIES: &[(Capability, &str)] = &[
    (Capability::Utility, "nvidia-smi"),
    (Capability::Utility, "nvidia-debugdump"),
    (Capability::Utility, "nvidia-persistenced"),
    (Capability::Compute, "nvidia-cuda-mps-control"),
    (Capability::Compute, "nvidia-cuda-mps-server"),
];

/// Folders (inside the driver root) searched for binaries, in order.
pub const BIN_DIRS: &[&str] = &[
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
];

/// IPC endpoints mounted when they exist.
pub const IPC: &[(Capability, &str)] = &[
    (Capability::Utility, "/run/nvidia-persistenced/socket"),
    (Capability::Utility, "/run/nvidia-fabricmanager/socket"),
    (Capability::Compute, "/tmp/nvidia-mps"),
];

/// Graphics / OpenCL config files mounted when they exist (paths the loaders look at).
#[rustfmt::skip]
pub const CONFIG_FILES: &[(Capability, &str)] = &[
    (Capability::Graphics, "/usr/share/glvnd/egl_vendor.d/10_nvidia.json"),
    (Capability::Graphics, "/etc/vulkan/icd.d/nvidia_icd.json"),
    (Capability::Graphics, "/usr/share/vulkan/icd.d/nvidia_icd.json"),
    (Capability::Graphics, "/etc/vulkan/implicit_layer.d/nvidia_layers.json"),
    (Capability::Graphics, "/usr/share/vulkan/implicit_layer.d/nvidia_layers.json"),
    (Capability::Compute, "/etc/OpenCL/vendors/nvidia.icd"),
];

/// Folder whose `*nvidia*.json` files are EGL external platform configs (graphics).
pub const EGL_EXTERNAL_PLATFORM_DIR: &str = "/usr/share/egl/egl_external_platform.d";

/// Whether a real library file belongs to `driver_version`: its suffix after `.so.` is the driver
/// version, or a bare SONAME number (libraries that do not carry the driver version).
pub fn matches_driver_version(file_name: &str, driver_version: &str) -> bool {
    let Some((_, suffix)) = file_name.rsplit_once(".so") else {
        return true;
    };
    let suffix = suffix.trim_start_matches('.');
    driver_version.is_empty()
        || suffix == driver_version
        || suffix.is_empty()
        || suffix.bytes().all(|b| b.is_ascii_digit())
}

/// Finds every driver file under the resolver's root.
pub fn discover_files(
    resolver: &mut RootResolver,
    cache: Option<&LdCache>,
    driver_version: &str,
    warnings: &mut Vec<String>,
) -> DriverFiles {
    let mut files = DriverFiles::default();
    for class in [LibClass::Native, LibClass::Compat32] {
        find_libraries(resolver, cache, class, driver_version, warnings, &mut files);
    }
    for lib in &files.libraries {
        let dir = lib.path.parent().unwrap_or(Path::new("/")).to_path_buf();
        if !files.library_dirs.contains(&dir) {
            files.library_dirs.push(dir);
        }
    }
    files.symlinks = container_symlinks(&files.libraries);
    let (xorg, xorg_links) = xorg_modules(resolver, &files.library_dirs, driver_version);
    for link in extra_links(resolver, &files.libraries)
        .into_iter()
        .chain(xorg_links)
    {
        if !files.symlinks.iter().any(|l| l.link == link.link) {
            files.symlinks.push(link);
        }
    }
    files.binaries = find_binaries(resolver);
    files.firmware = find_firmware(resolver, driver_version);
    files.ipc = existing(resolver, IPC);
    files.config_files = existing(resolver, CONFIG_FILES);
    files.config_files.extend(egl_platform_configs(resolver));
    files.config_files.extend(extra_configs(resolver));
    files.config_files.extend(xorg);
    files
}

/// `(key, in-root path)` candidates of one class: the cache's entries, or, without a cache, the
/// files of the standard library folders.
fn candidates(
    resolver: &RootResolver,
    cache: Option<&LdCache>,
    class: LibClass,
) -> Vec<(String, PathBuf)> {
    if let Some(cache) = cache {
        return cache
            .entries_of(class)
            .map(|e| (e.key.clone(), e.path.clone()))
            .collect();
    }
    if class != LibClass::Native {
        return Vec::new();
    }
    let mut out = Vec::new();
    for dir in STANDARD_LIB_DIRS {
        let Ok(entries) = std::fs::read_dir(resolver.host(Path::new(dir))) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if classify(&name).is_some() {
                out.push((name.clone(), Path::new(dir).join(name)));
            }
        }
    }
    out.sort();
    out
}

fn find_libraries(
    resolver: &mut RootResolver,
    cache: Option<&LdCache>,
    class: LibClass,
    driver_version: &str,
    warnings: &mut Vec<String>,
    files: &mut DriverFiles,
) {
    // Real path -> (capability, SONAME); BTreeMap for a stable order.
    let mut found: BTreeMap<PathBuf, (Capability, Option<String>)> = BTreeMap::new();
    // Like the dynamic linker, the first entry of a key wins (a copy in another folder is shadowed).
    let mut keys_seen = HashSet::new();
    let candidates = candidates(resolver, cache, class);
    let mut libs = LibResolver::new(resolver);
    for (key, path) in candidates {
        let Some((cap, prefix)) = classify(&key) else {
            continue;
        };
        if !keys_seen.insert(key.clone()) {
            continue;
        }
        let real = match libs.resolve(&path) {
            Ok(real) => real,
            Err(e) => {
                warnings.push(format!(
                    "ld.so.cache lists {} but it cannot be resolved: {e}",
                    path.display()
                ));
                continue;
            }
        };
        let name = real
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if !matches_driver_version(&name, driver_version) && !OWN_VERSION_PREFIXES.contains(&prefix)
        {
            tracing::debug!(path = %real.display(), driver_version, "skipping library of another driver version");
            continue;
        }
        let cap = if class == LibClass::Compat32 {
            Capability::Compat32
        } else {
            cap
        };
        let slot = found.entry(real).or_insert((cap, None));
        if key != prefix && slot.1.is_none() {
            slot.1 = Some(key);
        }
    }
    for (path, (capability, soname)) in found {
        files.libraries.push(DriverLibrary {
            capability,
            path,
            soname,
        });
    }
}

/// SONAME links plus the extra links NVIDIA's stack relies on.
pub fn container_symlinks(libraries: &[DriverLibrary]) -> Vec<ContainerSymlink> {
    let mut links = Vec::new();
    for lib in libraries {
        let (Some(dir), Some(name)) = (lib.path.parent(), lib.path.file_name()) else {
            continue;
        };
        let name = name.to_string_lossy();
        let mut add = |target: PathBuf, link: &str| {
            let link = dir.join(link);
            if link != target && !links.iter().any(|l: &ContainerSymlink| l.link == link) {
                links.push(ContainerSymlink {
                    capability: lib.capability,
                    target,
                    link,
                });
            }
        };
        // NVIDIA makes no SONAME link for the EGL platform libraries (their own versions);
        // ldconfig in the container does.
        let own_version = OWN_VERSION_PREFIXES.iter().any(|p| name.starts_with(p));
        if let Some(soname) = lib.soname.as_ref().filter(|_| !own_version) {
            add(lib.path.clone(), soname);
            if soname.starts_with("libcuda.so.") {
                add(dir.join(soname), "libcuda.so");
            }
            if soname.starts_with("libnvidia-opticalflow.so.") {
                add(dir.join(soname), "libnvidia-opticalflow.so");
            }
        }
        if name.starts_with("libGLX_nvidia.so.") {
            add(lib.path.clone(), "libGLX_indirect.so.0");
        }
    }
    links
}

fn find_binaries(resolver: &mut RootResolver) -> Vec<DriverFile> {
    let mut out = Vec::new();
    let dirs: Vec<PathBuf> = BIN_DIRS
        .iter()
        .filter_map(|d| resolver.resolve(Path::new(d)).ok())
        .collect();
    for (capability, name) in BINARIES {
        let found = dirs
            .iter()
            .map(|d| d.join(name))
            .find(|p| resolver.is_file(p));
        if let Some(path) = found {
            out.push(DriverFile {
                capability: *capability,
                path,
            });
        }
    }
    out
}

fn find_firmware(resolver: &mut RootResolver, driver_version: &str) -> Vec<PathBuf> {
    if driver_version.is_empty() {
        return Vec::new();
    }
    let mut seen = Vec::new();
    let mut out = Vec::new();
    for base in ["/lib/firmware/nvidia", "/usr/lib/firmware/nvidia"] {
        let dir = Path::new(base).join(driver_version);
        let Ok(real) = resolver.resolve(&dir) else {
            continue;
        };
        if seen.contains(&real) {
            continue;
        }
        let Ok(entries) = std::fs::read_dir(resolver.host(&real)) else {
            continue;
        };
        let mut names: Vec<String> = entries
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("gsp") && n.ends_with(".bin"))
            .collect();
        names.sort();
        out.extend(names.into_iter().map(|n| dir.join(n)));
        seen.push(real);
    }
    out
}

/// Well-known paths that exist inside the root, kept at their well-known (container) path.
fn existing(resolver: &mut RootResolver, list: &[(Capability, &str)]) -> Vec<DriverFile> {
    list.iter()
        .filter(|(_, p)| resolver.resolve(Path::new(p)).is_ok())
        .map(|(capability, p)| DriverFile {
            capability: *capability,
            path: PathBuf::from(p),
        })
        .collect()
}

fn egl_platform_configs(resolver: &mut RootResolver) -> Vec<DriverFile> {
    let dir = Path::new(EGL_EXTERNAL_PLATFORM_DIR);
    let Ok(real) = resolver.resolve(dir) else {
        return Vec::new();
    };
    let Ok(entries) = std::fs::read_dir(resolver.host(&real)) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("nvidia") && n.ends_with(".json"))
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|n| DriverFile {
            capability: Capability::Graphics,
            path: dir.join(n),
        })
        .collect()
}

#[cfg(test)]
#[path = "files_tests.rs"]
mod tests;
