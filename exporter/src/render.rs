//! `/metrics` in Prometheus text format 0.0.4, as dcgm-exporter renders it
//! (`internal/pkg/rendermetrics/render_metrics.go`): per counter, `# HELP`, `# TYPE`, then one
//! series per entity with the labels `gpu`, `UUID`, `pci_bus_id`, `device`, `modelName`,
//! (`GPU_I_PROFILE`, `GPU_I_ID` on MIG instances), `Hostname`, the label-type counters and pod
//! labels (sorted), then per-metric attributes (`err_code`, `err_msg` on XID). Integers print as
//! integers, doubles with six decimals.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Instant;

use gpu_mps_daemon::cri::PodRef;

use crate::collect::{Collector, Slot};
use crate::counters::Counters;
use crate::devices::GpuInfo;
use crate::fields::{is_double, LabelSource, Source};

/// Everything a rendering reads.
#[derive(Debug)]
pub struct View<'a> {
    pub collector: &'a Collector,
    pub counters: &'a Counters,
    /// `None` with `-n` (no `Hostname` label).
    pub hostname: Option<&'a str>,
    pub driver_version: &'a str,
    /// Per-pod series (`-k`), with the container → pod names known.
    pub pods: Option<&'a HashMap<String, PodRef>>,
    pub now: Instant,
}

/// A Prometheus label value, escaped (`\\`, `\"`, `\n`).
pub fn escape(v: &str) -> String {
    v.replace('\\', r"\\")
        .replace('"', r#"\""#)
        .replace('\n', r"\n")
}

/// `name="value"` pairs joined by commas (no braces).
pub fn pairs(labels: &[(&str, &str)]) -> String {
    let mut out = String::new();
    for (i, (k, v)) in labels.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{k}=\"{}\"", escape(v));
    }
    out
}

/// The identity labels of an entity (0: the GPU, 1 + i: MIG instance i), up to `Hostname`.
pub fn identity(g: &GpuInfo, entity: usize, hostname: Option<&str>) -> String {
    let gpu = g.index.to_string();
    let device = format!("nvidia{}", g.index);
    let mut l: Vec<(&str, &str)> = vec![
        ("gpu", &gpu),
        ("UUID", &g.uuid),
        ("pci_bus_id", &g.pci_bus_id),
        ("device", &device),
        ("modelName", &g.model),
    ];
    let gi;
    if let Some(inst) = entity.checked_sub(1).and_then(|i| g.instances.get(i)) {
        gi = inst.gi.to_string();
        l.push(("GPU_I_PROFILE", &inst.profile));
        l.push(("GPU_I_ID", &gi));
    }
    if let Some(h) = hostname {
        l.push(("Hostname", h));
    }
    pairs(&l)
}

/// The label-type counters of a GPU, sorted by name (`DCGM_FI_DRIVER_VERSION="…"`).
fn label_counters(v: &View<'_>, g: &GpuInfo) -> String {
    let mut labels: Vec<(&str, &str)> = v
        .counters
        .labels
        .iter()
        .map(|l| {
            let value = match l.source {
                LabelSource::DriverVersion => v.driver_version,
                LabelSource::Brand => g.brand.as_str(),
                LabelSource::Name => g.model.as_str(),
            };
            (l.name.as_str(), value)
        })
        .collect();
    labels.sort_unstable();
    pairs(&labels)
}

/// The labels of an entity's series: identity, then label counters.
pub fn entity_labels(v: &View<'_>, g: &GpuInfo, entity: usize) -> String {
    let mut s = identity(g, entity, v.hostname);
    let extra = label_counters(v, g);
    if !extra.is_empty() {
        s.push(',');
        s.push_str(&extra);
    }
    s
}

/// A value as dcgm-exporter prints it.
pub fn number(v: f64, double: bool) -> String {
    if double {
        format!("{v:.6}")
    } else {
        format!("{v:.0}")
    }
}

/// Text of common Xids for `err_msg` (NVIDIA's Xid catalog); others are "Unknown Error".
fn xid_text(xid: u64) -> &'static str {
    match xid {
        0 => "No Error",
        13 => "Graphics Engine Exception",
        31 => "GPU memory page fault",
        43 => "GPU stopped processing",
        45 => "Preemptive cleanup, due to previous errors",
        48 => "Double Bit ECC Error",
        63 => "ECC page retirement or row remapping recording event",
        64 => "ECC page retirement or row remapper recording failure",
        74 => "NVLINK Error",
        79 => "GPU has fallen off the bus",
        92 => "High single-bit ECC error rate",
        94 => "Contained ECC error",
        95 => "Uncontained ECC error",
        _ => "Unknown Error",
    }
}

/// The series of every served counter.
pub fn dcgm_series(v: &View<'_>, slots: &[Slot], out: &mut String) {
    // Labels from each sample's own identity: MIG instances as they were when it was taken.
    let labels: Vec<Vec<String>> = slots
        .iter()
        .map(|slot| match &slot.sample {
            Some(s) => (0..s.gpu.entity_count())
                .map(|e| entity_labels(v, &s.gpu, e))
                .collect(),
            None => Vec::new(),
        })
        .collect();
    for (ci, c) in v.counters.values.iter().enumerate() {
        let _ = writeln!(out, "# HELP {} {}", c.name, c.help);
        let _ = writeln!(out, "# TYPE {} {}", c.name, c.kind.as_str());
        for (gi, slot) in slots.iter().enumerate() {
            let Some(s) = &slot.sample else { continue };
            for &(e, _, value) in s.values.iter().filter(|(_, i, _)| *i == ci) {
                let Some(l) = labels.get(gi).and_then(|l| l.get(e)) else {
                    continue;
                };
                let attrs = if c.source == Source::XidErrors {
                    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                    let x = value as u64;
                    format!(",err_code=\"{x}\",err_msg=\"{}\"", xid_text(x))
                } else {
                    String::new()
                };
                let n = number(value, is_double(c.source));
                let _ = writeln!(out, "{}{{{l}{attrs}}} {n}", c.name);
            }
        }
    }
}

#[cfg(test)]
#[path = "render_tests.rs"]
mod tests;
