//! The whole `/metrics` page: dcgm-exporter's series ([`crate::render`]), then the per-pod and
//! exporter series ([`crate::render_pods`]).

use crate::collect::Slot;
use crate::render::{dcgm_series, View};
use crate::render_pods::{exporter_series, pod_series};

/// Renders the page.
pub fn render(v: &View<'_>) -> String {
    let slots: Vec<Slot> = (0..v.collector.gpus.len())
        .map(|i| v.collector.slot(i))
        .collect();
    let mut out = String::with_capacity(64 * 1024);
    dcgm_series(v, &slots, &mut out);
    if let Some(names) = v.pods {
        pod_series(v, &slots, names, &mut out);
    }
    exporter_series(v, &slots, &mut out);
    out
}
