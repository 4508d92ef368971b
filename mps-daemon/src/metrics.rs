//! `/metrics` in the Prometheus text exposition format (version 0.0.4), written by hand.
//!
//! A few gauges, counters and one histogram per GPU do not justify a metrics crate and its
//! dependency tree in a node daemon; the format is simple (`# HELP`, `# TYPE`, then
//! `name{label="value"} number` lines) and [`render`] is tested by parsing its output back.
//! The families, their labels and the reasons for their names are in [`crate::metrics_registry`];
//! every series carries dcgm-exporter's GPU labels ([`GPU_LABELS`]).

use std::fmt::Write;

use gpuhook_node::Inventory;

use crate::enforce::Reason;
pub use crate::histogram::{Histogram, BUCKETS};
use crate::metrics_registry::{self as registry, Family, Kind, FAMILIES, GPU_LABELS};
use crate::status::{Board, GpuIdentity, GpuState, GpuStatus, Identities};

/// Escapes a label value (`\`, `"`, newline).
pub fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

struct Out(String);

impl Out {
    fn head(&mut self, f: &Family) {
        let _ = writeln!(self.0, "# HELP {} {}", f.name, f.help);
        let _ = writeln!(self.0, "# TYPE {} {}", f.name, f.kind.as_str());
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], v: f64) {
        let l: Vec<String> = labels
            .iter()
            .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
            .collect();
        let _ = writeln!(self.0, "{name}{{{}}} {v}", l.join(","));
    }
}

/// The [`GpuIdentity`] of every GPU of an inventory, for [`Board::set_identities`].
pub fn identities_of(node: &Inventory) -> Identities {
    node.gpus
        .iter()
        .map(|g| {
            let id = GpuIdentity {
                model_name: g.name.clone(),
                pci_bus_id: g.pci_bus_id.clone(),
            };
            (g.uuid.clone(), id)
        })
        .collect()
}

/// The host name, as dcgm-exporter takes it (`os.Hostname()`: the kernel's node name).
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Values of [`GPU_LABELS`] for one GPU, in that order.
fn gpu_label_values(g: &GpuStatus, id: Option<&GpuIdentity>, host: &str) -> [String; 7] {
    let id = id.cloned().unwrap_or_default();
    [
        g.index.to_string(),
        g.uuid.clone(),
        id.pci_bus_id,
        // dcgm-exporter: `GPUDevice: fmt.Sprintf("nvidia%d", mi.DeviceInfo.GPU)`.
        format!("nvidia{}", g.index),
        id.model_name,
        host.to_string(),
        g.uuid.clone(),
    ]
}

type Getter = fn(&GpuStatus) -> Option<f64>;

/// The families with one sample per GPU.
const PER_GPU: [(Family, Getter); 10] = [
    (registry::UP, |g| Some(f64::from(u8::from(g.pid.is_some())))),
    (registry::READY, |g| {
        Some(f64::from(u8::from(g.state == GpuState::Ready)))
    }),
    (registry::RESTARTS, |g| Some(f64::from(g.restarts))),
    (registry::SERVERS, |g| Some(g.usage.servers.len() as f64)),
    (registry::CLIENTS, |g| Some(g.usage.clients.len() as f64)),
    (registry::WAITING_CLIENTS, |g| {
        Some(g.usage.waiting_clients.len() as f64)
    }),
    (registry::ACTIVE_THREAD_RATIO, |g| {
        Some(f64::from(g.active_thread_percentage) / 100.0)
    }),
    (registry::ACTIVE_THREAD_PERCENTAGE, |g| {
        Some(f64::from(g.active_thread_percentage))
    }),
    (registry::PINNED_MEMORY_LIMIT, |g| {
        g.pinned_memory_limit_mib.map(|m| (m << 20) as f64)
    }),
    (registry::PROBES_INCONCLUSIVE, |g| {
        Some(g.usage.probes_inconclusive as f64)
    }),
];

/// Samples of one GPU for a family with extra labels: `(extra labels, value)`.
fn labelled_samples(f: &Family, g: &GpuStatus) -> Vec<(Vec<(&'static str, String)>, f64)> {
    let u = &g.usage;
    let first = |ctr: &str| {
        u.clients
            .iter()
            .find(|c| c.container.as_deref() == Some(ctr))
    };
    let runtime_of = |ctr: &str| {
        first(ctr)
            .and_then(|c| c.runtime.clone())
            .unwrap_or_default()
    };
    let count = |m: &std::collections::BTreeMap<String, u64>, k: &str| {
        m.get(k).copied().unwrap_or(0) as f64
    };
    match f.name {
        n if n == registry::CONTAINER_CLIENTS.name || n == registry::CLIENTS_PER_CONTAINER.name => {
            u.clients_per_container()
                .into_iter()
                .map(|(ctr, n)| {
                    let rt = runtime_of(&ctr);
                    let c = first(&ctr);
                    let mut labels = vec![(f.labels[0], ctr), ("runtime", rt)];
                    // DCGM exporter's pod attribution (empty: not named, as Prometheus reads it).
                    if f.labels.len() > 2 {
                        let name =
                            |v: Option<&Option<String>>| v.cloned().flatten().unwrap_or_default();
                        labels.push(("pod", name(c.map(|c| &c.pod))));
                        labels.push(("namespace", name(c.map(|c| &c.namespace))));
                        labels.push(("container", name(c.map(|c| &c.container_name))));
                    }
                    (labels, n as f64)
                })
                .collect()
        }
        n if n == registry::TERMINATIONS.name => Reason::ALL
            .iter()
            .map(|r| {
                let v = count(&u.terminations, r.as_str());
                (vec![("reason", r.as_str().to_string())], v)
            })
            .collect(),
        n if n == registry::LIMIT_DRIFT.name => ["default", "server"]
            .iter()
            .map(|s| (vec![("scope", s.to_string())], count(&u.limit_drifts, s)))
            .collect(),
        _ => Vec::new(),
    }
}

/// The whole exposition, labelled with this host's name.
pub fn render(board: &Board) -> String {
    render_for(board, &hostname())
}

/// The whole exposition, with `Hostname` = `host`.
pub fn render_for(board: &Board, host: &str) -> String {
    let snap = board.snapshot();
    let lat = board.latencies();
    let ids = board.identities();
    let values: Vec<[String; 7]> = snap
        .gpus
        .iter()
        .map(|g| gpu_label_values(g, ids.get(&g.uuid), host))
        .collect();
    let base = |i: usize| -> Vec<(&str, &str)> {
        GPU_LABELS
            .iter()
            .zip(values[i].iter())
            .map(|(k, v)| (*k, v.as_str()))
            .collect()
    };
    let mut o = Out(String::new());
    for f in &FAMILIES {
        o.head(f);
        if let Some((_, get)) = PER_GPU.iter().find(|(p, _)| p.name == f.name) {
            for (i, g) in snap.gpus.iter().enumerate() {
                if let Some(v) = get(g) {
                    o.sample(f.name, &base(i), v);
                }
            }
        } else if f.kind == Kind::Histogram {
            for (i, g) in snap.gpus.iter().enumerate() {
                for (cmd, h) in lat.get(&g.uuid).into_iter().flatten() {
                    histogram(&mut o, f.name, base(i), cmd, h);
                }
            }
        } else {
            for (i, g) in snap.gpus.iter().enumerate() {
                for (extra, v) in labelled_samples(f, g) {
                    let mut l = base(i);
                    l.extend(extra.iter().map(|(k, v)| (*k, v.as_str())));
                    o.sample(f.name, &l, v);
                }
            }
        }
    }
    o.0
}

fn histogram(o: &mut Out, name: &str, base: Vec<(&str, &str)>, cmd: &str, h: &Histogram) {
    let mut cum = 0;
    let bounds = BUCKETS.iter().map(|b| b.to_string());
    for (b, n) in bounds.chain(["+Inf".to_string()]).zip(h.counts()) {
        cum += n;
        let mut labels = base.clone();
        labels.extend([("command", cmd), ("le", b.as_str())]);
        o.sample(&format!("{name}_bucket"), &labels, cum as f64);
    }
    let mut labels = base;
    labels.push(("command", cmd));
    o.sample(&format!("{name}_sum"), &labels, h.sum());
    o.sample(&format!("{name}_count"), &labels, h.count() as f64);
}

#[cfg(test)]
#[path = "metrics_tests.rs"]
mod tests;
