//! Who holds the node's GPUs and MIG devices, from the three sources the issue names: NVML's
//! running processes (gpuhook-mig's [`NvmlBackend::device_processes`]), the kubelet's
//! pod-resources allocations (the device plugin's pod-resources client, reused as is), and the
//! MPS daemon's clients (its `status.json`, read with gpu-mps-daemon's own reader).
//!
//! The agent pauses the device plugin and the MPS daemon before it applies, but that ends neither
//! the pods the kubelet gave a device to nor the processes on it: those are what this finds, so
//! a held device is not destroyed unless the manager runs with `--drain`.

use std::path::{Path, PathBuf};

use gpu_mps_daemon::status::StatusFile;
use gpuhook_device_plugin::podresources::{self, Assignment};
use gpuhook_mig::{device_id_uuid, DeviceHolders, Holder, NvmlBackend};

/// Where each source is read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HolderSources {
    /// The kubelet's pod-resources socket. `None`, or no socket there (no kubelet on this node):
    /// no pod holds anything.
    pub pod_resources: Option<PathBuf>,
    /// The MPS daemon's `status.json`. `None`, or no file (no daemon): no MPS client.
    pub mps_status: Option<PathBuf>,
    /// The host's `/proc`: an MPS client in the status file counts while its process lives.
    pub proc_root: PathBuf,
}

/// One row per device ID the kubelet allocated to a running pod's container.
pub fn pod_holders(assignments: &[Assignment]) -> DeviceHolders {
    let mut out = DeviceHolders::default();
    for a in assignments {
        out.add(
            device_id_uuid(&a.device_id),
            Holder::Pod {
                namespace: a.namespace.clone(),
                pod: a.pod.clone(),
                container: a.container.clone(),
                resource: a.resource.clone(),
            },
        );
    }
    out
}

/// The MPS daemon's clients whose process still lives (`alive`), on the GPU they use.
pub fn mps_holders(status: &StatusFile, alive: &dyn Fn(u32) -> bool) -> DeviceHolders {
    let mut out = DeviceHolders::default();
    for gpu in &status.gpus {
        for c in gpu.usage.clients.iter().filter(|c| alive(c.pid)) {
            let pod = match (&c.namespace, &c.pod) {
                (Some(ns), Some(p)) => Some(format!("{ns}/{p}")),
                (None, Some(p)) => Some(p.clone()),
                _ => None,
            };
            out.add(&gpu.uuid, Holder::MpsClient { pid: c.pid, pod });
        }
    }
    out
}

/// The kubelet's allocations through `socket` (none when there is no socket).
pub fn read_pod_resources(socket: &Path) -> Result<DeviceHolders, String> {
    if !socket.exists() {
        tracing::warn!(socket = %socket.display(), "no kubelet pod-resources socket: no pod is checked");
        return Ok(DeviceHolders::default());
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the pod-resources client: {e}"))?;
    let list = rt.block_on(podresources::list(socket)).map_err(|e| {
        format!("cannot tell which pods hold the GPUs: {e}; fix the kubelet's pod-resources socket, or run the manager with --drain")
    })?;
    Ok(pod_holders(&list))
}

/// The MPS daemon's live clients (none when there is no status file).
pub fn read_mps(status: &Path, proc_root: &Path) -> Result<DeviceHolders, String> {
    if !status.exists() {
        return Ok(DeviceHolders::default());
    }
    let file = gpu_mps_daemon::status_file::read(status)
        .map_err(|e| format!("cannot tell which MPS clients hold the GPUs: {e}"))?;
    let alive = |pid: u32| proc_root.join(pid.to_string()).is_dir();
    Ok(mps_holders(&file, &alive))
}

impl HolderSources {
    /// Every holder of every device now.
    pub fn collect(&self, nvml: &NvmlBackend) -> Result<DeviceHolders, String> {
        let mut out = nvml
            .device_processes()
            .map_err(|e| format!("cannot list the processes on the GPUs: {e}"))?;
        if let Some(socket) = &self.pod_resources {
            out.extend(read_pod_resources(socket)?);
        }
        if let Some(status) = &self.mps_status {
            out.extend(read_mps(status, &self.proc_root)?);
        }
        Ok(out)
    }
}

#[cfg(test)]
#[path = "holders_tests.rs"]
mod tests;
