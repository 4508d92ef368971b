//! Driver files NVIDIA's CDI spec adds beyond libnvidia-container's lists: the `.so`
//! development links where the host has them, the GBM backend link, the EGL platform
//! libraries, the X.org modules, and graphics config files.
//!
//! Rules from nvidia-container-toolkit v1.20.0:
//! - internal/discover/symlinks.go `getDotSoSymlinks`: a library's `libX.so -> SONAME` link is
//!   made in the container only when the host has `libX.so` beside it (a development link is
//!   not part of every driver install);
//! - internal/discover/graphics.go `graphicsDriverLibraries.Hooks`: with
//!   `libnvidia-allocator.so.<ver>`, `<dir>/gbm/nvidia-drm_gbm.so -> ../libnvidia-allocator.so.1`;
//!   `libglxserver_nvidia.so -> libglxserver_nvidia.so.<ver>`;
//! - graphics.go `newGraphicsLibrariesDiscoverer`: `libnvidia-egl-gbm.so.*.*`,
//!   `libnvidia-egl-wayland.so.*.*`, `libnvidia-egl-wayland2.so.*.*` (own versions), and
//!   `nvidia_drv.so`, `libglxserver_nvidia.so.<ver>` from the X.org module folders
//!   (`buildXOrgSearchPathsAtRoot`);
//! - graphics.go `NewGraphicsMountsDiscoverer` / `newVulkanConfigsDiscover`: config files under
//!   `/etc` and the XDG data dirs (`/usr/local/share`, `/usr/share`; root.go
//!   `configSearchOptions`).

use std::path::{Path, PathBuf};

use crate::inventory::{Capability, ContainerSymlink, DriverFile, DriverLibrary};
use crate::library_names::classify;
use crate::rootfs::RootResolver;

/// Libraries that carry their own version, not the driver's.
pub const OWN_VERSION_PREFIXES: &[&str] = &[
    "libnvidia-egl-gbm.so",
    "libnvidia-egl-wayland.so",
    "libnvidia-egl-wayland2.so",
];

/// Config files (relative to a config search dir) and their capability.
const CONFIGS: &[(Capability, &str)] = &[
    (Capability::Graphics, "nvidia/nvoptix.bin"),
    (Capability::Display, "X11/xorg.conf.d/10-nvidia.conf"),
    (
        Capability::Display,
        "X11/xorg.conf.d/nvidia-drm-outputclass.conf",
    ),
    (Capability::Graphics, "vulkan/icd.d/nvidia_icd.x86_64.json"),
    (Capability::Graphics, "vulkan/icd.d/nvidia_layers.json"),
];

/// Where config files are looked for, in order.
const CONFIG_DIRS: &[&str] = &["/etc", "/usr/local/share", "/usr/share"];

/// X.org module folders (without the per-library-dir ones).
const XORG_DIRS: &[&str] = &[
    "/usr/lib/xorg/modules/drivers",
    "/usr/lib/xorg/modules/extensions",
    "/usr/lib/xorg/modules/updates/drivers",
    "/usr/lib/xorg/modules/updates/extensions",
    "/usr/lib64/xorg/modules/drivers",
    "/usr/lib64/xorg/modules/extensions",
    "/usr/lib64/xorg/modules/updates/drivers",
    "/usr/lib64/xorg/modules/updates/extensions",
];

/// Whether `link` is one of the graphics links made here (GBM backend, GLX server module), which
/// NVIDIA's management spec leaves out with the rest of the graphics files.
pub fn is_graphics_link(link: &Path) -> bool {
    link.ends_with("gbm/nvidia-drm_gbm.so") || link.ends_with("libglxserver_nvidia.so")
}

/// Whether `path` is one of the EGL platform libraries (own versions) found here, which
/// NVIDIA's management spec leaves out with the rest of the graphics files.
pub fn is_graphics_library(path: &Path) -> bool {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    OWN_VERSION_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// `libX.so -> SONAME` where the host has `libX.so`, and the GBM backend link.
pub fn extra_links(
    resolver: &mut RootResolver,
    libraries: &[DriverLibrary],
) -> Vec<ContainerSymlink> {
    let mut out = Vec::new();
    for lib in libraries {
        let (Some(dir), Some(soname)) = (lib.path.parent(), lib.soname.as_deref()) else {
            continue;
        };
        let Some((_, prefix)) = classify(soname) else {
            continue;
        };
        let link = dir.join(prefix);
        if prefix != soname && resolver.exists(&link) {
            out.push(ContainerSymlink {
                capability: lib.capability,
                target: PathBuf::from(soname),
                link,
            });
        }
        // Native only: the GBM loader is a 64-bit X.org/Wayland component.
        if prefix == "libnvidia-allocator.so" && lib.capability != Capability::Compat32 {
            out.push(ContainerSymlink {
                capability: Capability::Graphics,
                target: PathBuf::from("../libnvidia-allocator.so.1"),
                link: dir.join("gbm/nvidia-drm_gbm.so"),
            });
        }
    }
    out
}

/// Config files found under the config dirs, each at its path.
pub fn extra_configs(resolver: &mut RootResolver) -> Vec<DriverFile> {
    let mut out = Vec::new();
    for (capability, rel) in CONFIGS {
        for dir in CONFIG_DIRS {
            let path = Path::new(dir).join(rel);
            if resolver.resolve(&path).is_ok() {
                out.push(DriverFile {
                    capability: *capability,
                    path,
                });
            }
        }
    }
    out
}

/// X.org modules (display): `nvidia_drv.so` and `libglxserver_nvidia.so.<ver>` (first found of
/// each), with the `libglxserver_nvidia.so` link.
pub fn xorg_modules(
    resolver: &mut RootResolver,
    lib_dirs: &[PathBuf],
    driver_version: &str,
) -> (Vec<DriverFile>, Vec<ContainerSymlink>) {
    let mut dirs: Vec<PathBuf> = Vec::new();
    for lib in lib_dirs {
        for sub in [
            "nvidia/xorg",
            "xorg/modules/drivers",
            "xorg/modules/extensions",
        ] {
            dirs.push(lib.join(sub));
        }
    }
    dirs.extend(XORG_DIRS.iter().map(PathBuf::from));
    let glx = format!("libglxserver_nvidia.so.{driver_version}");
    let (mut files, mut links) = (Vec::new(), Vec::new());
    for name in ["nvidia_drv.so", glx.as_str()] {
        let Some(path) = dirs
            .iter()
            .map(|d| d.join(name))
            .find(|p| resolver.resolve(p).is_ok())
        else {
            continue;
        };
        if name == glx {
            if let Some(dir) = path.parent() {
                links.push(ContainerSymlink {
                    capability: Capability::Display,
                    target: PathBuf::from(name),
                    link: dir.join("libglxserver_nvidia.so"),
                });
            }
        }
        files.push(DriverFile {
            capability: Capability::Display,
            path,
        });
    }
    (files, links)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lib(cap: Capability, path: &str, soname: &str) -> DriverLibrary {
        DriverLibrary {
            capability: cap,
            path: path.into(),
            soname: Some(soname.into()),
        }
    }

    /// symlinks.go `getDotSoSymlinks` (`.so` link only where the host has one) and graphics.go
    /// `graphicsDriverLibraries.Hooks` (GBM and glxserver links), v1.20.0.
    #[test]
    fn dev_links_only_where_the_host_has_them() {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        let l = r.join("usr/lib64");
        std::fs::create_dir_all(&l).unwrap();
        std::os::unix::fs::symlink("libnvidia-ml.so.1", l.join("libnvidia-ml.so")).unwrap();
        let x = r.join("usr/lib64/xorg/modules/extensions");
        std::fs::create_dir_all(&x).unwrap();
        std::fs::write(x.join("libglxserver_nvidia.so.570.1"), b"").unwrap();
        let libs = [
            lib(
                Capability::Utility,
                "/usr/lib64/libnvidia-ml.so.570.1",
                "libnvidia-ml.so.1",
            ),
            lib(
                Capability::Video,
                "/usr/lib64/libnvcuvid.so.570.1",
                "libnvcuvid.so.1",
            ),
            lib(
                Capability::Compute,
                "/usr/lib64/libnvidia-allocator.so.570.1",
                "libnvidia-allocator.so.1",
            ),
        ];
        let mut res = RootResolver::new(r);
        let links: Vec<(String, String)> = extra_links(&mut res, &libs)
            .into_iter()
            .map(|s| (s.target.display().to_string(), s.link.display().to_string()))
            .collect();
        assert_eq!(
            links,
            [
                (
                    "libnvidia-ml.so.1".to_string(),
                    "/usr/lib64/libnvidia-ml.so".to_string()
                ),
                (
                    "../libnvidia-allocator.so.1".to_string(),
                    "/usr/lib64/gbm/nvidia-drm_gbm.so".to_string()
                ),
            ]
        );
        let (files, links) = xorg_modules(&mut res, &[PathBuf::from("/usr/lib64")], "570.1");
        assert_eq!(files.len(), 1);
        assert_eq!(
            links[0].link,
            PathBuf::from("/usr/lib64/xorg/modules/extensions/libglxserver_nvidia.so")
        );
    }
}
