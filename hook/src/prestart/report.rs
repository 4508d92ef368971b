//! What the hook says about a container: one structured decision line per outcome
//! ([`crate::logging::Decision`]); the fields a container chooses are bounded by the callers.

use std::collections::BTreeSet;

use gpuhook_node::{Capability, DeviceRef};

use super::{Applied, COMMAND};
use crate::logging::{Decision, Outcome};
use crate::request::NotGpuReason;

/// What the decision lines say about an injection.
#[derive(Debug)]
pub(super) struct Summary {
    /// GPUs (`1,3,2:0`) then MPS shares, bounded.
    pub devices: String,
    pub caps: String,
    pub source: &'static str,
}

/// `1,3,2:0` (GPU indexes; `parent:mig` for MIG devices).
pub fn device_list(devices: &[DeviceRef]) -> String {
    devices
        .iter()
        .map(|d| match d {
            DeviceRef::Gpu { index } => index.to_string(),
            DeviceRef::Mig {
                parent_index,
                index,
            } => format!("{parent_index}:{index}"),
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn skip_reason(r: NotGpuReason) -> &'static str {
    match r {
        NotGpuReason::NoRequest => "no GPU requested",
        NotGpuReason::Void => "NVIDIA_VISIBLE_DEVICES contains void",
        NotGpuReason::EnvVarNotAccepted => {
            "NVIDIA_VISIBLE_DEVICES is ignored: the container is unprivileged and \
             accept-envvar-when-unprivileged = false (request GPUs with cdi.k8s.io annotations)"
        }
    }
}

pub(super) fn log_skip(container: &str, r: NotGpuReason) {
    let mut d = Decision::new(COMMAND, Outcome::Skip);
    d.container = Some(container);
    d.reason = Some(skip_reason(r));
    d.log();
}

pub(super) fn caps_list(caps: &BTreeSet<Capability>) -> String {
    caps.iter()
        .map(|c| c.as_str())
        .collect::<Vec<_>>()
        .join(",")
}

/// The `inject` decision line: what was made in the container.
pub(super) fn log_injected(container: &str, summary: &Summary, applied: &Applied) {
    let note = format!(
        "{} nodes, {} mounts, {} symlinks, ldcache {}, params override {}{}",
        applied.devices,
        applied.mounts,
        applied.symlinks,
        if applied.ldcache_updated {
            "updated"
        } else {
            "untouched"
        },
        if applied.params_overridden {
            "mounted"
        } else {
            "not needed (no driver params in the container's /proc)"
        },
        if applied.proc_files_absent.is_empty() {
            String::new()
        } else {
            format!(
                ", {} MIG /proc files absent from the container's procfs",
                applied.proc_files_absent.len()
            )
        }
    );
    let mut d = Decision::new(COMMAND, Outcome::Inject);
    d.container = Some(container);
    d.source = Some(summary.source);
    d.devices = Some(&summary.devices);
    d.capabilities = Some(&summary.caps);
    d.reason = Some(&note);
    d.log();
}
