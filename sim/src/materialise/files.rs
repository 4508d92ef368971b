//! Everything else a driver install leaves on a node: utility and compute binaries, GSP
//! firmware, the persistenced / fabric manager sockets and the graphics / OpenCL vendor files.

use std::os::unix::net::UnixListener;
use std::path::Path;

use super::fsutil::{copy_atomic, io, mkdirs, under, write_atomic};
use super::SimError;
use crate::profile::NodeProfile;

/// Name of the simulated `nvidia-smi` binary of this crate.
pub const SIM_NVIDIA_SMI: &str = "sim-nvidia-smi";
/// Name of the MPS control simulator (crate gpuhook-sim-mps-control).
pub const SIM_MPS_CONTROL: &str = "sim-nvidia-cuda-mps-control";

fn stub_script(name: &str, p: &NodeProfile) -> String {
    format!(
        "#!/bin/sh\n# gpuhook-sim stub of {name} (driver {ver}); it does nothing.\necho \"{name}: simulated driver {ver} (gpuhook-sim profile {profile})\"\nexit 0\n",
        ver = p.driver_version,
        profile = p.name
    )
}

/// Installs `/usr/bin` binaries; returns their paths inside the root and notes for skipped ones.
pub fn binaries(
    root: &Path,
    p: &NodeProfile,
    bin_dir: &Path,
) -> Result<(Vec<String>, Vec<String>), SimError> {
    let mut installed = Vec::new();
    let mut notes = Vec::new();
    let smi = bin_dir.join(SIM_NVIDIA_SMI);
    if !smi.is_file() {
        return Err(SimError::BinaryMissing {
            path: smi,
            package: "gpuhook-sim",
        });
    }
    copy_atomic(&smi, &under(root, "/usr/bin/nvidia-smi"), 0o755)?;
    installed.push("/usr/bin/nvidia-smi".to_string());
    for name in [
        "nvidia-debugdump",
        "nvidia-persistenced",
        "nvidia-cuda-mps-server",
    ] {
        let dst = format!("/usr/bin/{name}");
        write_atomic(&under(root, &dst), stub_script(name, p).as_bytes(), 0o755)?;
        installed.push(dst);
    }
    let mps = bin_dir.join(SIM_MPS_CONTROL);
    if mps.is_file() {
        copy_atomic(
            &mps,
            &under(root, "/usr/bin/nvidia-cuda-mps-control"),
            0o755,
        )?;
        installed.push("/usr/bin/nvidia-cuda-mps-control".to_string());
    } else {
        notes.push(format!(
            "nvidia-cuda-mps-control not installed: {} is missing (cargo build -p gpuhook-sim-mps-control)",
            mps.display()
        ));
    }
    Ok((installed, notes))
}

/// GSP firmware files under `/lib/firmware/nvidia/<version>/`.
pub fn firmware(root: &Path, p: &NodeProfile) -> Result<Vec<String>, SimError> {
    let mut out = Vec::new();
    if !p.features.gsp_firmware {
        return Ok(out);
    }
    for blob in ["gsp_ga10x.bin", "gsp_tu10x.bin"] {
        let path = format!("/lib/firmware/nvidia/{}/{blob}", p.driver_version);
        let contents = format!(
            "gpuhook-sim GSP firmware placeholder {blob} {}\n",
            p.driver_version
        );
        write_atomic(&under(root, &path), contents.as_bytes(), 0o644)?;
        out.push(path);
    }
    Ok(out)
}

/// Leaves a real unix socket file at `path` (bound, then closed), replacing an old one.
fn socket(root: &Path, path: &str) -> Result<(), SimError> {
    let full = under(root, path);
    if let Some(parent) = full.parent() {
        mkdirs(parent)?;
    }
    match std::fs::remove_file(&full) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(io("remove old socket", &full)(e))
        }
        _ => {}
    }
    drop(UnixListener::bind(&full).map_err(io("bind unix socket", &full))?);
    Ok(())
}

/// The persistenced and fabric manager sockets enabled in the profile.
pub fn sockets(root: &Path, p: &NodeProfile) -> Result<Vec<String>, SimError> {
    let mut out = Vec::new();
    let wanted = [
        (
            p.features.persistenced_socket,
            "/run/nvidia-persistenced/socket",
        ),
        (
            p.features.fabricmanager_socket,
            "/run/nvidia-fabricmanager/socket",
        ),
    ];
    for (on, path) in wanted {
        if on {
            socket(root, path)?;
            out.push(path.to_string());
        }
    }
    Ok(out)
}

const EGL_VENDOR: &str = r#"{
    "file_format_version" : "1.0.0",
    "ICD" : {
        "library_path" : "libEGL_nvidia.so.0"
    }
}
"#;

const GBM_PLATFORM: &str = r#"{
    "file_format_version" : "1.0.0",
    "ICD" : {
        "library_path" : "libnvidia-egl-gbm.so.1"
    }
}
"#;

const VULKAN_ICD: &str = r#"{
    "file_format_version" : "1.0.1",
    "ICD": {
        "library_path": "libGLX_nvidia.so.0",
        "api_version" : "1.4.303"
    }
}
"#;

const VULKAN_LAYERS: &str = r#"{
    "file_format_version" : "1.0.0",
    "layer": {
        "name": "VK_LAYER_NV_optimus",
        "type": "INSTANCE",
        "library_path": "libGLX_nvidia.so.0",
        "api_version" : "1.4.303",
        "implementation_version" : "1",
        "description" : "NVIDIA Optimus layer",
        "functions": {
            "vkGetInstanceProcAddr": "vk_optimusGetInstanceProcAddr",
            "vkGetDeviceProcAddr": "vk_optimusGetDeviceProcAddr"
        },
        "enable_environment": {
            "__NV_PRIME_RENDER_OFFLOAD": "1"
        },
        "disable_environment": {
            "DISABLE_LAYER_NV_OPTIMUS_1": ""
        }
    }
}
"#;

/// OpenCL ICD file (compute) and, with `features.graphics`, the EGL/GBM/Vulkan vendor files.
pub fn config_files(root: &Path, p: &NodeProfile) -> Result<Vec<String>, SimError> {
    let mut files: Vec<(&str, &str)> =
        vec![("/etc/OpenCL/vendors/nvidia.icd", "libnvidia-opencl.so.1\n")];
    if p.features.graphics {
        files.extend([
            ("/usr/share/glvnd/egl_vendor.d/10_nvidia.json", EGL_VENDOR),
            (
                "/usr/share/egl/egl_external_platform.d/15_nvidia_gbm.json",
                GBM_PLATFORM,
            ),
            ("/etc/vulkan/icd.d/nvidia_icd.json", VULKAN_ICD),
            (
                "/etc/vulkan/implicit_layer.d/nvidia_layers.json",
                VULKAN_LAYERS,
            ),
        ]);
    }
    let mut out = Vec::new();
    for (path, contents) in files {
        write_atomic(&under(root, path), contents.as_bytes(), 0o644)?;
        out.push(path.to_string());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn graphics_config_files_are_valid_json_naming_nvidia_libraries() {
        for text in [
            super::EGL_VENDOR,
            super::GBM_PLATFORM,
            super::VULKAN_ICD,
            super::VULKAN_LAYERS,
        ] {
            let v: serde_json::Value = serde_json::from_str(text).unwrap();
            let lib = v
                .get("ICD")
                .or_else(|| v.get("layer"))
                .and_then(|o| o.get("library_path"));
            assert!(
                lib.and_then(|l| l.as_str())
                    .is_some_and(|l| l.starts_with("lib")),
                "{text}"
            );
        }
    }
}
