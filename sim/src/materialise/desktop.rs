//! Files of a desktop/workstation driver install beyond the libraries: the X.org driver and GLX
//! server module, the X config snippet, the Wayland EGL platform file, OptiX's `nvoptix.bin`
//! (`features.xorg`) and the application profiles (`features.application_profiles`).
//!
//! Paths follow NVIDIA's `.run` installer and the distribution packages: X modules under
//! `/usr/lib/xorg/modules` (`/usr/lib64/xorg/modules` on RPM layouts), data under
//! `/usr/share/nvidia`, `/usr/share/X11/xorg.conf.d` and `/usr/share/egl/egl_external_platform.d`.

use std::path::Path;

use super::fsutil::{symlink_atomic, under, write_atomic};
use super::SimError;
use crate::elf;
use crate::profile::NodeProfile;

const XORG_CONF: &str = "Section \"OutputClass\"\n    Identifier \"nvidia\"\n    MatchDriver \"nvidia-drm\"\n    Driver \"nvidia\"\n    Option \"AllowEmptyInitialConfiguration\"\n    ModulePath \"/usr/lib/nvidia/xorg\"\n    ModulePath \"/usr/lib/xorg/modules\"\nEndSection\n";

const WAYLAND_PLATFORM: &str = r#"{
    "file_format_version" : "1.0.0",
    "ICD" : {
        "library_path" : "libnvidia-egl-wayland.so.1"
    }
}
"#;

/// `/usr/lib/xorg/modules`, or `/usr/lib64/xorg/modules` when the libraries are in `/usr/lib64`.
pub fn xorg_module_dir(p: &NodeProfile) -> &'static str {
    if p.lib_dir.trim_end_matches('/') == "/usr/lib64" {
        "/usr/lib64/xorg/modules"
    } else {
        "/usr/lib/xorg/modules"
    }
}

/// Path of the GLX server module's unversioned link (`libglxserver_nvidia.so`).
pub fn glxserver_link(p: &NodeProfile) -> Option<String> {
    p.features
        .xorg
        .then(|| format!("{}/extensions/libglxserver_nvidia.so", xorg_module_dir(p)))
}

/// Installs the desktop files the profile asks for; returns their paths inside the root.
pub fn install(root: &Path, p: &NodeProfile) -> Result<Vec<String>, SimError> {
    let mut out = Vec::new();
    let ver = &p.driver_version;
    if p.features.xorg {
        let modules = xorg_module_dir(p);
        let drv = format!("{modules}/drivers/nvidia_drv.so");
        let glx = format!("{modules}/extensions/libglxserver_nvidia.so.{ver}");
        let elves = [
            (
                &drv,
                elf::shared_object("nvidia_drv.so", &["nvidiaModuleData"]),
            ),
            (
                &glx,
                elf::shared_object("libglxserver_nvidia.so", &["glxModuleData"]),
            ),
        ];
        for (path, bytes) in elves {
            write_atomic(&under(root, path), &bytes, 0o755)?;
            out.push(path.clone());
        }
        if let Some(link) = glxserver_link(p) {
            symlink_atomic(
                &format!("libglxserver_nvidia.so.{ver}"),
                &under(root, &link),
            )?;
        }
        for (path, text) in [
            ("/usr/share/X11/xorg.conf.d/10-nvidia.conf", XORG_CONF),
            (
                "/usr/share/egl/egl_external_platform.d/10_nvidia_wayland.json",
                WAYLAND_PLATFORM,
            ),
            ("/usr/share/nvidia/nvoptix.bin", "gpuhook-sim OptiX data\n"),
        ] {
            write_atomic(&under(root, path), text.as_bytes(), 0o644)?;
            out.push(path.to_string());
        }
    }
    if p.features.application_profiles {
        for kind in ["rc", "key-documentation"] {
            let path = format!("/usr/share/nvidia/nvidia-application-profiles-{ver}-{kind}");
            let text = format!("# gpuhook-sim application profiles {kind} (driver {ver})\n{{\"rules\": [], \"profiles\": []}}\n");
            write_atomic(&under(root, &path), text.as_bytes(), 0o644)?;
            out.push(path);
        }
    }
    Ok(out)
}
