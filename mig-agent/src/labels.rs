//! The Node's labels and annotations the manager reads and writes, and the pause protocol as
//! data: which `nvidia.com/gpu.deploy.*` labels to set to `paused-for-mig-change`, and the exact
//! previous values to put back.
//!
//! NVIDIA's k8s-mig-manager (v0.15.0, `pkg/mig/reconfigure`) pauses five fixed labels (and
//! `nvidia.com/gpu.deploy.client` when present), writes them even when they were absent, and
//! restores them to `true` (or `false`). Here a label is paused only when its client runs on the
//! node (the label enables it, or one of its processes holds a GPU being changed), and restored to
//! its exact previous value: an absent label is removed again. The previous values travel in the
//! same PATCH as the pause, in the annotation [`PAUSED_ANNOTATION`], so a crash or a pod restart at
//! any step leaves the Node itself saying what to restore.

use std::collections::BTreeMap;

/// The label that selects the config (NVIDIA's name).
pub const CONFIG_LABEL: &str = "nvidia.com/mig.config";
/// The label that reports the manager's state (NVIDIA's name and values).
pub const STATE_LABEL: &str = "nvidia.com/mig.config.state";
/// The value a paused deploy label gets (NVIDIA's).
pub const PAUSED: &str = "paused-for-mig-change";
/// The previous values of the labels this manager paused (JSON object; `null` = absent).
pub const PAUSED_ANNOTATION: &str = "gpuhook.io/mig-manager.paused-labels";
/// The config a reboot was attempted for: never a second reboot for the same config.
pub const REBOOT_ANNOTATION: &str = "gpuhook.io/mig-manager.reboot-attempted";
/// The reason of the last `failed` state (a label value cannot hold it).
pub const REASON_ANNOTATION: &str = "gpuhook.io/mig-manager.failure";

/// `nvidia.com/mig.config.state`'s values, as NVIDIA's manager writes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Pending,
    Rebooting,
    Success,
    Failed,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Pending => "pending",
            State::Rebooting => "rebooting",
            State::Success => "success",
            State::Failed => "failed",
        }
    }

    pub fn parse(value: &str) -> Option<State> {
        Some(match value {
            "pending" => State::Pending,
            "rebooting" => State::Rebooting,
            "success" => State::Success,
            "failed" => State::Failed,
            _ => return None,
        })
    }
}

/// A GPU client the manager pauses: its deploy label and the process names it runs as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuClient {
    pub label: &'static str,
    /// Its processes' names (compared with `/proc/<pid>/comm`, which the kernel cuts to 15
    /// bytes).
    pub processes: &'static [&'static str],
    /// Serves only some GPUs (gpuhook's MPS daemon: `<mps-root>/<GPU-UUID>`): paused only when
    /// it serves one being changed. A node-wide client (a DaemonSet over every GPU) is paused
    /// whenever its label enables it.
    pub gpu_scoped: bool,
}

/// The clients: NVIDIA's operands (the labels its manager pauses, `app=` pods it waits for) and
/// gpuhook's device plugin (the same label: on a mixed node both plugins pause together) and MPS
/// daemon.
pub const CLIENTS: &[GpuClient] = &[
    GpuClient {
        label: "nvidia.com/gpu.deploy.device-plugin",
        processes: &["nvidia-device-plugin", "gpuhook-device-plugin"],
        gpu_scoped: false,
    },
    GpuClient {
        label: "nvidia.com/gpu.deploy.gpu-feature-discovery",
        processes: &["gpu-feature-discovery"],
        gpu_scoped: false,
    },
    GpuClient {
        label: "nvidia.com/gpu.deploy.dcgm-exporter",
        processes: &["dcgm-exporter"],
        gpu_scoped: false,
    },
    GpuClient {
        label: "nvidia.com/gpu.deploy.dcgm",
        processes: &["nv-hostengine"],
        gpu_scoped: false,
    },
    GpuClient {
        label: "nvidia.com/gpu.deploy.nvsm",
        processes: &["nvsm"],
        gpu_scoped: false,
    },
    GpuClient {
        label: "nvidia.com/gpu.deploy.client",
        processes: &[],
        gpu_scoped: false,
    },
    GpuClient {
        label: "nvidia.com/gpu.deploy.mps-daemon",
        processes: &[
            "gpu-mps-daemon",
            "nvidia-cuda-mps-control",
            "nvidia-cuda-mps-server",
        ],
        gpu_scoped: true,
    },
];

impl GpuClient {
    /// Whether a process whose `/proc/<pid>/comm` is `comm` is one of this client's.
    pub fn runs_as(&self, comm: &str) -> bool {
        self.processes
            .iter()
            .any(|p| p.get(..15).unwrap_or(p) == comm.trim_end())
    }
}

/// A Node's labels (or annotations).
pub type Labels = BTreeMap<String, String>;

/// Label (or annotation) changes for one merge PATCH: `None` removes the key.
pub type Changes = BTreeMap<String, Option<String>>;

/// What to pause: the new values and the previous ones (the restore).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pause {
    /// label -> previous value (`None`: absent).
    pub previous: Changes,
}

impl Pause {
    pub fn is_empty(&self) -> bool {
        self.previous.is_empty()
    }

    /// The labels that get `paused-for-mig-change`.
    pub fn labels(&self) -> Changes {
        self.previous
            .keys()
            .map(|k| (k.clone(), Some(PAUSED.to_string())))
            .collect()
    }

    /// The annotation recording the previous values (JSON).
    pub fn record(&self) -> String {
        let map: serde_json::Map<String, serde_json::Value> = self
            .previous
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    v.clone().map_or(serde_json::Value::Null, Into::into),
                )
            })
            .collect();
        serde_json::Value::Object(map).to_string()
    }

    /// Reads [`Pause::record`] back; `None` for text that is not such a record.
    pub fn from_record(text: &str) -> Option<Pause> {
        let v: serde_json::Value = serde_json::from_str(text).ok()?;
        let mut previous = Changes::new();
        for (k, v) in v.as_object()? {
            let old = match v {
                serde_json::Value::Null => None,
                serde_json::Value::String(s) => Some(s.clone()),
                _ => return None,
            };
            previous.insert(k.clone(), old);
        }
        Some(Pause { previous })
    }
}

/// Which labels to pause on a node with `labels`, given the clients (by label) whose processes
/// hold a GPU being changed. A label that says `false` stays `false` (NVIDIA's rule); one that is
/// already paused is left to the restore of the run that paused it.
pub fn pause_for(labels: &Labels, holding: &[&str]) -> Pause {
    let mut previous = Changes::new();
    for c in CLIENTS {
        let current = labels.get(c.label);
        if matches!(current.map(String::as_str), Some("false") | Some(PAUSED)) {
            continue;
        }
        let holds = holding.contains(&c.label);
        let enabled = current.is_some() && !c.gpu_scoped;
        if holds || enabled {
            previous.insert(c.label.to_string(), current.cloned());
        }
    }
    Pause { previous }
}

/// The deploy labels left at `paused-for-mig-change` with no record of their previous value
/// (a record lost to a hand edit): they go back to `true`, as NVIDIA's manager restores them.
pub fn orphaned_pauses(labels: &Labels, record: &Pause) -> Changes {
    CLIENTS
        .iter()
        .filter(|c| labels.get(c.label).map(String::as_str) == Some(PAUSED))
        .filter(|c| !record.previous.contains_key(c.label))
        .map(|c| (c.label.to_string(), Some("true".to_string())))
        .collect()
}

#[cfg(test)]
#[path = "labels_tests.rs"]
mod tests;
