//! Who holds a GPU or a MIG device: the answer [`crate::InUse`] gives, gathered from the node's
//! sources (NVML's running processes, the kubelet's pod-resources allocations, the MPS daemon's
//! clients) into one snapshot, [`DeviceHolders`], keyed by device UUID.
//!
//! Plain data: each source is read where its client lives (NVML here, in
//! [`crate::NvmlBackend::device_processes`]; pod-resources and MPS in the Kubernetes agent) and
//! added with [`DeviceHolders::add`].

use std::collections::BTreeMap;
use std::fmt;

use crate::state::{GpuInstance, GpuState};

/// Who holds a device: NVML's running processes, the kubelet's pod-resources allocations, the
/// MPS daemon's clients ([`crate::DeviceHolders`] is the snapshot the CLI and the agent fill).
/// An empty list: nobody.
pub trait InUse {
    /// The holders of MIG device(s) of GPU instance `gi`: a destroy of it is refused.
    fn holders(&self, gpu: &GpuState, gi: &GpuInstance) -> Vec<Holder>;
    /// The holders of the GPU itself (not of one of its MIG devices): a MIG mode change of it
    /// is refused.
    fn gpu_holders(&self, _gpu: &GpuState) -> Vec<Holder> {
        Vec::new()
    }
}

/// Nobody holds anything (NVML's own `IN_USE` still protects).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoHolders;

impl InUse for NoHolders {
    fn holders(&self, _: &GpuState, _: &GpuInstance) -> Vec<Holder> {
        Vec::new()
    }
}

/// One holder of a device.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Holder {
    /// A process NVML lists on the device (`compute`, `graphics`, `mps`: its running-process
    /// list).
    Process { pid: u32, kind: &'static str },
    /// A container the kubelet allocated the device to (pod-resources `List`).
    Pod {
        namespace: String,
        pod: String,
        container: String,
        resource: String,
    },
    /// A client of gpuhook's MPS daemon on the device (its `status.json`), with its pod when the
    /// daemon knows it (`namespace/pod`).
    MpsClient { pid: u32, pod: Option<String> },
}

impl Holder {
    /// What ends this holder, for the error's fix.
    fn stop_hint(&self) -> &'static str {
        match self {
            Holder::Process { .. } => "end the process",
            Holder::Pod { .. } => "delete the pod",
            Holder::MpsClient { .. } => "end the MPS client (or delete its pod)",
        }
    }
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Holder::Process { pid, kind } => write!(f, "{kind} process pid {pid}"),
            Holder::Pod {
                namespace,
                pod,
                container,
                resource,
            } => write!(
                f,
                "pod {namespace}/{pod} (container {container}, {resource})"
            ),
            Holder::MpsClient { pid, pod: Some(p) } => {
                write!(f, "MPS client pid {pid} of pod {p}")
            }
            Holder::MpsClient { pid, pod: None } => write!(f, "MPS client pid {pid}"),
        }
    }
}

/// `"pod a/b (…), compute process pid 7"`: holders for a message.
pub fn describe(holders: &[Holder]) -> String {
    let names: Vec<String> = holders.iter().map(ToString::to_string).collect();
    names.join(", ")
}

/// What the admin can do about `holders`, without `--drain`.
pub fn fix_for(holders: &[Holder]) -> String {
    let mut hints: Vec<&str> = holders.iter().map(Holder::stop_hint).collect();
    hints.sort_unstable();
    hints.dedup();
    format!(
        "{}, then apply again; or apply with --drain to destroy it anyway",
        hints.join(" / ")
    )
}

/// The base device UUID of a device ID the kubelet knows: NVIDIA's plugin (and ours) name a
/// shared replica `<uuid>::<n>`.
pub fn device_id_uuid(id: &str) -> &str {
    id.split("::").next().unwrap_or(id)
}

/// A snapshot of who holds which device, by GPU or MIG device UUID.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceHolders {
    by_uuid: BTreeMap<String, Vec<Holder>>,
}

impl DeviceHolders {
    /// Records `holder` on the device `uuid` (a GPU or MIG device UUID), once.
    pub fn add(&mut self, uuid: &str, holder: Holder) {
        let list = self.by_uuid.entry(uuid.to_string()).or_default();
        if !list.contains(&holder) {
            list.push(holder);
            list.sort();
        }
    }

    /// Everything in `other` too.
    pub fn extend(&mut self, other: DeviceHolders) {
        for (uuid, list) in other.by_uuid {
            for h in list {
                self.add(&uuid, h);
            }
        }
    }

    /// The holders of device `uuid`.
    pub fn of(&self, uuid: &str) -> &[Holder] {
        self.by_uuid.get(uuid).map_or(&[], Vec::as_slice)
    }

    pub fn is_empty(&self) -> bool {
        self.by_uuid.values().all(Vec::is_empty)
    }
}

impl InUse for DeviceHolders {
    fn holders(&self, _: &GpuState, gi: &GpuInstance) -> Vec<Holder> {
        let mut out: Vec<Holder> = Vec::new();
        for uuid in gi.cis.iter().filter_map(|c| c.uuid.as_deref()) {
            out.extend(self.of(uuid).iter().cloned());
        }
        out
    }

    fn gpu_holders(&self, gpu: &GpuState) -> Vec<Holder> {
        self.of(&gpu.uuid).to_vec()
    }
}

#[cfg(test)]
#[path = "holders_tests.rs"]
mod tests;
