//! The setup hook's application-profile step: EGL and Vulkan in the container see only the
//! container's GPUs.
//!
//! NVIDIA's `update-application-profile` hook (nvidia-container-toolkit v1.20.0
//! cmd/nvidia-cdi-hook/update-application-profile `run`, `selectGPUMinors`,
//! `buildApplicationProfileConfig`): list the container's `/dev/nvidia[0-9]+` character devices,
//! set bit `minor` (0..63) of a mask for each, and write
//! `/etc/nvidia/nvidia-application-profiles-rc.d/10-container.conf` (file 0444, folders 0555)
//! with the driver setting `EGLVisibleDGPUDevices` = mask; nothing when there is no GPU node.
//! It runs after the runtime made the container's device nodes (createContainer), through the
//! container root's openat2 lookups.

use std::path::Path;

use gpuhook_inject::cuda_compat::{list_dir, DirEntry};
use gpuhook_inject::{ContainerRoot, InjectError};

/// Folder of the driver's application profiles in the container.
pub const PROFILE_DIR: &str = "/etc/nvidia/nvidia-application-profiles-rc.d";
/// The profile this step writes.
pub const PROFILE_FILE: &str = "/etc/nvidia/nvidia-application-profiles-rc.d/10-container.conf";

/// The mask of GPU minors among `/dev` entries (`nvidia<digits>` character devices, minor < 64).
pub fn gpu_mask(entries: &[DirEntry]) -> u64 {
    entries
        .iter()
        .filter(|e| {
            e.char_device
                && e.name
                    .strip_prefix("nvidia")
                    .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
        .map(|e| libc::minor(e.rdev))
        .filter(|&m| m < 64)
        .fold(0, |mask, m| mask | (1u64 << m))
}

/// The profile text for `mask` (NVIDIA's `buildApplicationProfileConfig`).
pub fn profile(mask: u64) -> String {
    format!(
        "{{\"profiles\":[{{\"name\":\"_container_\",\"settings\":[\"EGLVisibleDGPUDevices\",0x{mask:x}]}}],\"rules\":[{{\"pattern\":[],\"profile\":\"_container_\"}}]}}"
    )
}

/// Writes the profile into the container root; false when the container has no GPU node.
pub fn write_profile(rootfs: &Path) -> Result<bool, InjectError> {
    let root = ContainerRoot::open(rootfs)?;
    let entries = list_dir(&root, Path::new("/dev"))?;
    write_mask(&root, gpu_mask(entries.as_deref().unwrap_or_default()))
}

/// The mask of the GPU nodes an OCI spec makes the runtime create (`linux.devices`): the nodes
/// the hook would find in the container's `/dev`.
pub fn spec_gpu_mask(spec: &serde_json::Value) -> u64 {
    let entries: Vec<DirEntry> = spec
        .pointer("/linux/devices")
        .and_then(serde_json::Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|d| {
            let name = d.get("path")?.as_str()?.strip_prefix("/dev/")?;
            let minor = u32::try_from(d.get("minor")?.as_u64()?).ok()?;
            let major = u32::try_from(d.get("major")?.as_u64()?).ok()?;
            Some(DirEntry {
                name: name.to_string(),
                char_device: d.get("type")?.as_str()? == "c",
                rdev: libc::makedev(major, minor),
            })
        })
        .collect();
    gpu_mask(&entries)
}

/// What the setup hook `setup` would write into the image, done before the container exists
/// (the runtime wrapper's early setup): the CUDA compat linker config, and the application
/// profile for the GPU nodes of `spec`. Returns the compat folder to put first in the
/// `ld.so.cache` folders, when the image's compat libraries are used.
pub fn early_steps(
    rootfs: &Path,
    setup: &gpuhook_cdi::edits::SetupHookArgs,
    spec: &serde_json::Value,
) -> Result<Option<std::path::PathBuf>, InjectError> {
    let compat = match &setup.cuda_compat_host_driver_version {
        Some(version) => gpuhook_inject::cuda_compat::enable_cuda_compat(rootfs, version)?,
        None => None,
    };
    if setup.application_profile {
        let root = ContainerRoot::open(rootfs)?;
        write_mask(&root, spec_gpu_mask(spec))?;
    }
    Ok(compat)
}

fn write_mask(root: &ContainerRoot, mask: u64) -> Result<bool, InjectError> {
    if mask == 0 {
        return Ok(false);
    }
    root.ensure_dir(Path::new(PROFILE_DIR), 0o555)?;
    root.write_file(Path::new(PROFILE_FILE), profile(mask).as_bytes(), 0o444)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, char_device: bool, minor: u32) -> DirEntry {
        DirEntry {
            name: name.into(),
            char_device,
            rdev: libc::makedev(195, minor),
        }
    }

    /// update-application-profile.go: `^nvidia[0-9]+$` character devices, minors 0..63, the
    /// exact JSON of `buildApplicationProfileConfig`.
    #[test]
    fn mask_and_text_follow_nvidia() {
        let entries = [
            entry("nvidia0", true, 0),
            entry("nvidia3", true, 3),
            entry("nvidiactl", true, 255),
            entry("nvidia-uvm", true, 0),
            entry("nvidia7", false, 7),
            entry("nvidia70", true, 70),
        ];
        assert_eq!(gpu_mask(&entries), 0b1001);
        assert_eq!(
            profile(0x9),
            r#"{"profiles":[{"name":"_container_","settings":["EGLVisibleDGPUDevices",0x9]}],"rules":[{"pattern":[],"profile":"_container_"}]}"#
        );
        assert_eq!(gpu_mask(&entries[2..5]), 0);
        let spec = serde_json::json!({"linux": {"devices": [
            {"path": "/dev/nvidia2", "type": "c", "major": 195, "minor": 2},
            {"path": "/dev/nvidiactl", "type": "c", "major": 195, "minor": 255},
            {"path": "/dev/nvidia-caps/nvidia-cap1", "type": "c", "major": 511, "minor": 1}
        ]}});
        assert_eq!(spec_gpu_mask(&spec), 0b100);
    }

    /// The early steps fail with the typed error of the container root (the wrapper, a library,
    /// matches it), worded as `InjectError` words it.
    #[test]
    fn early_steps_fail_with_a_typed_error() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("no-rootfs");
        let setup = gpuhook_cdi::edits::SetupHookArgs {
            application_profile: true,
            ..Default::default()
        };
        let spec = serde_json::json!({"linux": {"devices": [
            {"path": "/dev/nvidia0", "type": "c", "major": 195, "minor": 0}
        ]}});
        let err: InjectError = early_steps(&missing, &setup, &spec).unwrap_err();
        let want = ContainerRoot::open(&missing).err().unwrap();
        assert_eq!(err.to_string(), want.to_string());
        assert!(err.to_string().contains("no-rootfs"), "{err}");
    }
}
