//! CDI devices of other kinds that the prestart hook injects itself: the MPS shares
//! (`nvidia.com/gpu-mps`) `gpu-mps-daemon` publishes.
//!
//! A runtime without CDI support hands those names to nobody, and a GPU container without its
//! MPS pipe directory would run outside the daemon's limits; so the hook loads the spec
//! directories of its config ([`gpuhook_cdi::Registry`], the same consumer the runtime wrapper
//! uses), resolves every name before anything is injected, and merges the edits with the
//! `nvidia.com/gpu` edits (each identical node, mount and hook once). The env edits cannot be
//! applied by an OCI hook (the process env is fixed before hooks run): [`ForeignEdits::env_keys`]
//! names them for the log.

use std::path::PathBuf;

use gpuhook_cdi::{CdiError, ContainerEdits, Registry};

/// Edits of the requested foreign CDI devices, merged (common edits of each spec once).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ForeignEdits {
    pub edits: ContainerEdits,
    /// Keys of the env edits (`CUDA_MPS_PIPE_DIRECTORY`, ...), each once.
    pub env_keys: Vec<String>,
    /// Spec files the devices came from.
    pub specs: Vec<PathBuf>,
}

/// Resolves `names` in `registry`; every unknown name fails the whole request.
pub fn foreign_edits(registry: &Registry, names: &[String]) -> Result<ForeignEdits, CdiError> {
    let devices = registry.resolve(names)?;
    let mut out = ForeignEdits::default();
    for d in &devices {
        if !out.specs.contains(&d.spec.path) {
            out.specs.push(d.spec.path.clone());
            merge(&mut out.edits, &d.spec.spec.container_edits);
        }
        merge(&mut out.edits, &d.device().container_edits);
    }
    for e in &out.edits.env {
        let key = e.split_once('=').map_or(e.as_str(), |(k, _)| k).to_string();
        if !out.env_keys.contains(&key) {
            out.env_keys.push(key);
        }
    }
    Ok(out)
}

/// Appends `more` to `into`, skipping entries `into` already has (identical node, mount, hook or
/// env entry).
pub fn merge(into: &mut ContainerEdits, more: &ContainerEdits) {
    fn add<T: Clone + PartialEq>(into: &mut Vec<T>, more: &[T]) {
        for x in more {
            if !into.contains(x) {
                into.push(x.clone());
            }
        }
    }
    add(&mut into.env, &more.env);
    add(&mut into.device_nodes, &more.device_nodes);
    add(&mut into.hooks, &more.hooks);
    add(&mut into.mounts, &more.mounts);
    add(&mut into.net_devices, &more.net_devices);
    add(&mut into.additional_gids, &more.additional_gids);
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuhook_cdi::{Device, DeviceNode, Mount, Spec};

    fn write_spec(dir: &std::path::Path) {
        let node = DeviceNode {
            path: "/dev/nvidia0".into(),
            major: Some(195),
            minor: Some(0),
            ..Default::default()
        };
        let mount = |h: &str, c: &str| Mount {
            host_path: h.into(),
            container_path: c.into(),
            options: vec!["nosuid".into(), "nodev".into(), "rbind".into()],
            mount_type: None,
        };
        let dev = |name: &str, pct: u32| Device {
            name: name.into(),
            annotations: Default::default(),
            container_edits: ContainerEdits {
                env: vec![
                    "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps".into(),
                    format!("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={pct}"),
                ],
                device_nodes: vec![node.clone()],
                mounts: vec![mount("/mps/pipe", "/tmp/nvidia-mps")],
                ..Default::default()
            },
        };
        let spec = Spec {
            cdi_version: "0.5.0".into(),
            kind: crate::request::NVIDIA_GPU_MPS_KIND.into(),
            devices: vec![dev("0", 50), dev("0-small", 25)],
            container_edits: ContainerEdits {
                mounts: vec![mount("/lib/x.so", "/lib/x.so")],
                ..Default::default()
            },
            ..Default::default()
        };
        std::fs::write(
            dir.join("nvidia.com-gpu-mps.json"),
            serde_json::to_vec(&spec).unwrap(),
        )
        .unwrap();
    }

    #[test]
    fn resolves_merges_and_dedupes() {
        let dir = tempfile::tempdir().unwrap();
        write_spec(dir.path());
        let reg = Registry::load(&[dir.path()]);
        assert!(reg.errors.is_empty(), "{:?}", reg.errors);
        let names = vec![
            "nvidia.com/gpu-mps=0".to_string(),
            "nvidia.com/gpu-mps=0-small".to_string(),
        ];
        let got = foreign_edits(&reg, &names).unwrap();
        // Common mount once, then the device's (identical pipe mount and node once).
        let dsts: Vec<_> = got
            .edits
            .mounts
            .iter()
            .map(|m| m.container_path.as_str())
            .collect();
        assert_eq!(dsts, ["/lib/x.so", "/tmp/nvidia-mps"]);
        assert_eq!(got.edits.device_nodes.len(), 1);
        assert_eq!(
            got.env_keys,
            [
                "CUDA_MPS_PIPE_DIRECTORY",
                "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
            ]
        );
        assert_eq!(got.specs, [dir.path().join("nvidia.com-gpu-mps.json")]);
    }

    #[test]
    fn unknown_name_fails_with_every_unknown_name() {
        let dir = tempfile::tempdir().unwrap();
        write_spec(dir.path());
        let reg = Registry::load(&[dir.path()]);
        let names = vec![
            "nvidia.com/gpu-mps=0".to_string(),
            "nvidia.com/gpu-mps=0-nope".to_string(),
        ];
        let err = foreign_edits(&reg, &names).unwrap_err().to_string();
        assert_eq!(err, "unresolvable CDI devices nvidia.com/gpu-mps=0-nope");
    }
}
