//! `/metrics` in the Prometheus text exposition format (version 0.0.4), written by hand.
//!
//! A few gauges, counters and one histogram per GPU do not justify a metrics crate and its
//! dependency tree in a node daemon; the format is simple (`# HELP`, `# TYPE`, then
//! `name{label="value"} number` lines) and [`render`] is tested by parsing its output back.
//! Every series carries `gpu` (index) and `uuid` labels.

use std::fmt::Write;

use crate::enforce::Reason;
use crate::status::{Board, GpuState};

/// Upper bounds (seconds) of the command latency buckets.
pub const BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// A latency histogram with [`BUCKETS`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Histogram {
    /// Observations per bucket (not cumulative); the last slot is `+Inf` only.
    counts: [u64; BUCKETS.len() + 1],
    sum: f64,
}

impl Histogram {
    pub fn observe(&mut self, v: f64) {
        let i = BUCKETS
            .iter()
            .position(|b| v <= *b)
            .unwrap_or(BUCKETS.len());
        self.counts[i] += 1;
        self.sum += v;
    }

    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }
}

/// Escapes a label value (`\`, `"`, newline).
pub fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

struct Out(String);

impl Out {
    fn head(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.0, "# HELP {name} {help}");
        let _ = writeln!(self.0, "# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], v: f64) {
        let l: Vec<String> = labels
            .iter()
            .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
            .collect();
        let _ = writeln!(self.0, "{name}{{{}}} {v}", l.join(","));
    }
}

/// The whole exposition.
pub fn render(board: &Board) -> String {
    let snap = board.snapshot();
    let lat = board.latencies();
    let mut o = Out(String::new());
    let gpu_labels: Vec<(String, String)> = snap
        .gpus
        .iter()
        .map(|g| (g.index.to_string(), g.uuid.clone()))
        .collect();
    let l = |i: usize| {
        let (gpu, uuid) = &gpu_labels[i];
        vec![("gpu", gpu.as_str()), ("uuid", uuid.as_str())]
    };
    type Getter = fn(&crate::status::GpuStatus) -> Option<f64>;
    let simple: [(&str, &str, &str, Getter); 7] = [
        (
            "gpuhook_mps_up",
            "gauge",
            "1 while the GPU's MPS control daemon process runs.",
            |g| Some(f64::from(u8::from(g.pid.is_some()))),
        ),
        (
            "gpuhook_mps_ready",
            "gauge",
            "1 while the GPU is ready: limits applied and read back, daemon answering.",
            |g| Some(f64::from(u8::from(g.state == GpuState::Ready))),
        ),
        (
            "gpuhook_mps_restarts_total",
            "counter",
            "Restarts of the GPU's control daemon.",
            |g| Some(f64::from(g.restarts)),
        ),
        (
            "gpuhook_mps_servers",
            "gauge",
            "MPS server processes of the GPU.",
            |g| Some(g.usage.servers.len() as f64),
        ),
        (
            "gpuhook_mps_clients",
            "gauge",
            "MPS client processes of the GPU.",
            |g| Some(g.usage.clients.len() as f64),
        ),
        (
            "gpuhook_mps_active_thread_percentage",
            "gauge",
            "Configured server active thread percentage (the largest share).",
            |g| Some(f64::from(g.active_thread_percentage)),
        ),
        (
            "gpuhook_mps_pinned_memory_limit_bytes",
            "gauge",
            "Configured server pinned device memory limit (the largest share).",
            |g| g.pinned_memory_limit_mib.map(|m| (m << 20) as f64),
        ),
    ];
    for (name, kind, help, get) in simple {
        o.head(name, kind, help);
        for (i, g) in snap.gpus.iter().enumerate() {
            if let Some(v) = get(g) {
                o.sample(name, &l(i), v);
            }
        }
    }
    let name = "gpuhook_mps_clients_per_container";
    o.head(
        name,
        "gauge",
        "MPS client processes of the GPU per container.",
    );
    for (i, g) in snap.gpus.iter().enumerate() {
        for (ctr, n) in g.usage.clients_per_container() {
            let runtime = g
                .usage
                .clients
                .iter()
                .find(|c| c.container.as_deref() == Some(ctr.as_str()))
                .and_then(|c| c.runtime.clone())
                .unwrap_or_default();
            let mut labels = l(i);
            labels.extend([("container", ctr.as_str()), ("runtime", runtime.as_str())]);
            o.sample(name, &labels, n as f64);
        }
    }
    let name = "gpuhook_mps_client_terminations_total";
    o.head(
        name,
        "counter",
        "MPS clients ended with terminate_client, by reason.",
    );
    for (i, g) in snap.gpus.iter().enumerate() {
        for r in Reason::ALL {
            let n = g.usage.terminations.get(r.as_str()).copied().unwrap_or(0);
            let mut labels = l(i);
            labels.push(("reason", r.as_str()));
            o.sample(name, &labels, n as f64);
        }
    }
    let name = "gpuhook_mps_limit_drift_total";
    o.head(
        name,
        "counter",
        "MPS limits found changed through the pipe directory and restored, by scope (default, server).",
    );
    for (i, g) in snap.gpus.iter().enumerate() {
        for scope in ["default", "server"] {
            let n = g.usage.limit_drifts.get(scope).copied().unwrap_or(0);
            let mut labels = l(i);
            labels.push(("scope", scope));
            o.sample(name, &labels, n as f64);
        }
    }
    let name = "gpuhook_mps_probes_inconclusive_total";
    o.head(
        name,
        "counter",
        "Health probes not run for a reason of our own (no free fd, cannot fork); never a restart.",
    );
    for (i, g) in snap.gpus.iter().enumerate() {
        o.sample(name, &l(i), g.usage.probes_inconclusive as f64);
    }
    let name = "gpuhook_mps_command_duration_seconds";
    o.head(
        name,
        "histogram",
        "Duration of nvidia-cuda-mps-control commands, by command.",
    );
    for (i, g) in snap.gpus.iter().enumerate() {
        for (cmd, h) in lat.get(&g.uuid).into_iter().flatten() {
            let mut cum = 0;
            for (b, n) in BUCKETS
                .iter()
                .map(|b| b.to_string())
                .chain(["+Inf".to_string()])
                .zip(h.counts)
            {
                cum += n;
                let mut labels = l(i);
                labels.extend([("command", cmd.as_str()), ("le", b.as_str())]);
                o.sample(&format!("{name}_bucket"), &labels, cum as f64);
            }
            let mut labels = l(i);
            labels.push(("command", cmd.as_str()));
            o.sample(&format!("{name}_sum"), &labels, h.sum);
            o.sample(&format!("{name}_count"), &labels, h.count() as f64);
        }
    }
    o.0
}

#[cfg(test)]
#[path = "metrics_tests.rs"]
mod tests;
