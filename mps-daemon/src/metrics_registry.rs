//! Every metric family `/metrics` exports, with its type, help and labels, in one table.
//!
//! The renderer writes only families of this table and the Grafana dashboard test
//! (`tests/metrics_dashboard.rs`) checks every query against it, so the dashboard cannot refer
//! to a metric or label that the daemon does not export.
//!
//! Label names follow NVIDIA's dcgm-exporter so that an operator can join gpuhook's series
//! with `DCGM_FI_*` ones on `UUID`, `gpu` and `Hostname` (see [`GPU_LABELS`]). Metric names
//! keep Prometheus' own conventions (`snake_case`, one `gpuhook_mps_` prefix, base units,
//! `_total` on counters, ratios rather than percentages) instead of DCGM's `DCGM_FI_*` field
//! names, which name DCGM fields rather than follow a naming rule.

/// Prometheus metric type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Gauge,
    Counter,
    Histogram,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Gauge => "gauge",
            Kind::Counter => "counter",
            Kind::Histogram => "histogram",
        }
    }
}

/// One metric family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Family {
    pub name: &'static str,
    pub kind: Kind,
    pub help: &'static str,
    /// Labels besides [`GPU_LABELS`] (`le` of histogram buckets not included).
    pub labels: &'static [&'static str],
    /// Set on a deprecated family: the family that replaces it (removed in the next release).
    pub replaced_by: Option<&'static str>,
}

/// Labels of every series, as dcgm-exporter writes them on its GPU series (`gpu`, `UUID`,
/// `pci_bus_id`, `device`, `modelName`, `Hostname`), then the deprecated lower-case `uuid` that
/// gpuhook used before (kept for one release; dcgm-exporter has the same `uuid` spelling behind
/// its `--use-old-namespace` flag).
pub const GPU_LABELS: [&str; 7] = [
    "gpu",
    "UUID",
    "pci_bus_id",
    "device",
    "modelName",
    "Hostname",
    "uuid",
];

const fn family(name: &'static str, kind: Kind, help: &'static str) -> Family {
    Family {
        name,
        kind,
        help,
        labels: &[],
        replaced_by: None,
    }
}

const fn labelled(f: Family, labels: &'static [&'static str]) -> Family {
    Family { labels, ..f }
}

const fn deprecated(f: Family, by: &'static str) -> Family {
    Family {
        replaced_by: Some(by),
        ..f
    }
}

use Kind::{Counter, Gauge, Histogram};

pub const UP: Family = family(
    "gpuhook_mps_up",
    Gauge,
    "1 while the GPU's MPS control daemon process runs.",
);
pub const READY: Family = family(
    "gpuhook_mps_ready",
    Gauge,
    "1 while the GPU is ready: limits applied and read back, daemon answering.",
);
pub const RESTARTS: Family = family(
    "gpuhook_mps_restarts_total",
    Counter,
    "Restarts of the GPU's control daemon.",
);
pub const SERVERS: Family = family(
    "gpuhook_mps_servers",
    Gauge,
    "MPS server processes of the GPU.",
);
pub const CLIENTS: Family = family(
    "gpuhook_mps_clients",
    Gauge,
    "MPS client processes of the GPU.",
);
pub const WAITING_CLIENTS: Family = family(
    "gpuhook_mps_waiting_clients",
    Gauge,
    "MPS clients waiting for another user's server to finish (one user's server runs at a time).",
);
pub const ACTIVE_THREAD_RATIO: Family = family(
    "gpuhook_mps_active_thread_ratio",
    Gauge,
    "Configured server active thread share, 0 to 1 (the largest share).",
);
pub const ACTIVE_THREAD_PERCENTAGE: Family = deprecated(
    family(
        "gpuhook_mps_active_thread_percentage",
        Gauge,
        "Deprecated, use gpuhook_mps_active_thread_ratio: configured server active thread percentage (the largest share).",
    ),
    ACTIVE_THREAD_RATIO.name,
);
pub const PINNED_MEMORY_LIMIT: Family = family(
    "gpuhook_mps_pinned_memory_limit_bytes",
    Gauge,
    "Configured server pinned device memory limit (the largest share).",
);
pub const CONTAINER_CLIENTS: Family = labelled(
    family(
        "gpuhook_mps_container_clients",
        Gauge,
        "MPS client processes of the GPU per container (container_id: the runtime's id; pod, namespace, container: with --cri-socket).",
    ),
    &["container_id", "runtime", "pod", "namespace", "container"],
);
pub const CLIENTS_PER_CONTAINER: Family = deprecated(
    labelled(
        family(
            "gpuhook_mps_clients_per_container",
            Gauge,
            "Deprecated, use gpuhook_mps_container_clients: MPS client processes of the GPU per container id.",
        ),
        &["container", "runtime"],
    ),
    CONTAINER_CLIENTS.name,
);
pub const TERMINATIONS: Family = labelled(
    family(
        "gpuhook_mps_client_terminations_total",
        Counter,
        "MPS clients ended with terminate_client, by reason.",
    ),
    &["reason"],
);
pub const LIMIT_DRIFT: Family = labelled(
    family(
        "gpuhook_mps_limit_drift_total",
        Counter,
        "MPS limits found changed through the pipe directory and restored, by scope (default, server).",
    ),
    &["scope"],
);
pub const PROBES_INCONCLUSIVE: Family = family(
    "gpuhook_mps_probes_inconclusive_total",
    Counter,
    "Health probes not run for a reason of our own (no free fd, cannot fork); never a restart.",
);
pub const COMMAND_DURATION: Family = labelled(
    family(
        "gpuhook_mps_command_duration_seconds",
        Histogram,
        "Duration of nvidia-cuda-mps-control commands (the health probe included), by command.",
    ),
    &["command"],
);

/// All families, in the order `/metrics` writes them.
pub const FAMILIES: [Family; 15] = [
    UP,
    READY,
    RESTARTS,
    SERVERS,
    CLIENTS,
    WAITING_CLIENTS,
    ACTIVE_THREAD_RATIO,
    ACTIVE_THREAD_PERCENTAGE,
    PINNED_MEMORY_LIMIT,
    CONTAINER_CLIENTS,
    CLIENTS_PER_CONTAINER,
    TERMINATIONS,
    LIMIT_DRIFT,
    PROBES_INCONCLUSIVE,
    COMMAND_DURATION,
];

impl Family {
    /// Sample names of the family (`_bucket`, `_sum`, `_count` for a histogram).
    pub fn sample_names(&self) -> Vec<String> {
        match self.kind {
            Kind::Histogram => ["_bucket", "_sum", "_count"]
                .iter()
                .map(|s| format!("{}{s}", self.name))
                .collect(),
            _ => vec![self.name.to_string()],
        }
    }

    /// Every label a sample of the family can carry.
    pub fn all_labels(&self) -> Vec<&'static str> {
        let mut v: Vec<&'static str> = GPU_LABELS.to_vec();
        v.extend(self.labels);
        if self.kind == Kind::Histogram {
            v.push("le");
        }
        v
    }
}

/// The family a sample name belongs to.
pub fn family_of_sample(sample: &str) -> Option<&'static Family> {
    FAMILIES
        .iter()
        .find(|f| f.sample_names().iter().any(|n| n == sample))
}
