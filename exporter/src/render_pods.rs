//! The exporter's own series: per-pod usage of each device (with `-k`) and the collector's
//! health (stale, lost, sample age, errors, refused fields).
//!
//! Per-pod series carry the device's labels plus `container`, `namespace`, `pod`; on one device
//! they sum to the device series of the same figure (`DCGM_FI_DEV_FB_USED`,
//! `DCGM_FI_DEV_GPU_UTIL`), the share of no known pod being the series with empty pod labels.
//! Device series are never copied per pod.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use gpu_mps_daemon::cri::PodRef;

use crate::collect::Slot;
use crate::fields::Source;
use crate::pods::{key, split, PodKey};
use crate::render::{entity_labels, identity, number, pairs, View};
use crate::sample::{Proc, Sample};

pub const POD_FB_USED: &str = "gpuhook_pod_fb_used";
pub const POD_GPU_UTIL: &str = "gpuhook_pod_gpu_util";
pub const POD_PROCESSES: &str = "gpuhook_pod_gpu_processes";

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn pod_labels(base: &str, k: Option<&PodKey>) -> String {
    let (ns, pod, c) = k.map_or(("", "", ""), |(n, p, c)| {
        (n.as_str(), p.as_str(), c.as_str())
    });
    format!(
        "{base},{}",
        pairs(&[("container", c), ("namespace", ns), ("pod", pod)])
    )
}

fn value(s: &Sample, entity: usize, counter: Option<usize>) -> Option<f64> {
    let ci = counter?;
    s.values
        .iter()
        .find(|(e, i, _)| *e == entity && *i == ci)
        .map(|(_, _, v)| *v)
}

/// Per pod: summed memory, summed SM %, process count.
type Parts = BTreeMap<PodKey, (f64, f64, u64)>;

fn group(procs: &[Proc], names: &HashMap<String, PodRef>) -> (Parts, u64) {
    let mut parts = Parts::new();
    let mut unknown = 0;
    for p in procs {
        let pod = p.container.as_ref().and_then(|c| names.get(c));
        let Some(pod) = pod else {
            unknown += 1;
            continue;
        };
        let e = parts.entry(key(pod)).or_default();
        e.0 += p.used_mib.unwrap_or(0.0);
        e.1 += p.sm.unwrap_or(0.0);
        e.2 += 1;
    }
    (parts, unknown)
}

/// `gpuhook_pod_*` series of every entity.
pub fn pod_series(v: &View<'_>, slots: &[Slot], names: &HashMap<String, PodRef>, out: &mut String) {
    let find = |src: Source| v.counters.values.iter().position(|c| c.source == src);
    let (fb_ci, util_ci) = (find(Source::FbUsed), find(Source::GpuUtil));
    let (mut fb, mut util, mut count) = (String::new(), String::new(), String::new());
    for slot in slots {
        let Some(s) = &slot.sample else { continue };
        let g = &*s.gpu;
        for (e, procs) in s.procs.iter().enumerate() {
            let base = entity_labels(v, g, e);
            let (parts, unknown) = group(procs, names);
            for (k, (_, _, n)) in &parts {
                let _ = writeln!(
                    count,
                    "{POD_PROCESSES}{{{}}} {n}",
                    pod_labels(&base, Some(k))
                );
            }
            if unknown > 0 {
                let _ = writeln!(
                    count,
                    "{POD_PROCESSES}{{{}}} {unknown}",
                    pod_labels(&base, None)
                );
            }
            if let Some(dev) = value(s, e, fb_ci) {
                let m = parts.iter().map(|(k, p)| (k.clone(), p.0)).collect();
                for (k, share) in split(dev, &m) {
                    let _ = writeln!(
                        fb,
                        "{POD_FB_USED}{{{}}} {}",
                        pod_labels(&base, k.as_ref()),
                        number(share, true)
                    );
                }
            }
            // NVML has no per-process utilization on MIG: no util shares there.
            if let Some(dev) = value(s, e, util_ci).filter(|_| !g.mig) {
                let m = parts.iter().map(|(k, p)| (k.clone(), p.1)).collect();
                for (k, share) in split(dev, &m) {
                    let _ = writeln!(
                        util,
                        "{POD_GPU_UTIL}{{{}}} {}",
                        pod_labels(&base, k.as_ref()),
                        number(share, true)
                    );
                }
            }
        }
    }
    header(out, POD_FB_USED, "gauge", "Framebuffer memory used by the pod's processes on this device (in MiB); the series with empty pod labels holds the rest, so a device's series sum to DCGM_FI_DEV_FB_USED.");
    out.push_str(&fb);
    header(out, POD_GPU_UTIL, "gauge", "The pod's share of GPU utilization (in %), from NVML per-process SM samples; a device's series sum to DCGM_FI_DEV_GPU_UTIL. Not on MIG instances (NVML has no per-process utilization there).");
    out.push_str(&util);
    header(
        out,
        POD_PROCESSES,
        "gauge",
        "Processes of the pod with a context on this device (compute, graphics and MPS clients).",
    );
    out.push_str(&count);
}

/// `gpuhook_exporter_*`: collector health per GPU and the refused fields.
pub fn exporter_series(v: &View<'_>, slots: &[Slot], out: &mut String) {
    let c = v.collector;
    let (mut stale, mut lost, mut age, mut errors) =
        (String::new(), String::new(), String::new(), String::new());
    for (g, slot) in c.gpus.iter().zip(slots) {
        let l = identity(g, 0, v.hostname);
        let _ = writeln!(
            stale,
            "gpuhook_exporter_gpu_stale{{{l}}} {}",
            u8::from(c.is_stale(slot, v.now))
        );
        let _ = writeln!(
            lost,
            "gpuhook_exporter_gpu_lost{{{l}}} {}",
            u8::from(slot.lost)
        );
        if let Some(s) = &slot.sample {
            let secs = v.now.saturating_duration_since(s.taken).as_secs_f64();
            let _ = writeln!(age, "gpuhook_exporter_sample_age_seconds{{{l}}} {secs:.6}");
        }
        let _ = writeln!(
            errors,
            "gpuhook_exporter_sample_errors_total{{{l}}} {}",
            slot.errors
        );
    }
    header(out, "gpuhook_exporter_gpu_stale", "gauge", "1 while this GPU's values are older than the stale limit or its NVML sample runs past the per-GPU timeout; the last good values are served.");
    out.push_str(&stale);
    header(out, "gpuhook_exporter_gpu_lost", "gauge", "1 while NVML answers GPU_IS_LOST for this GPU (fallen off the bus); its value series are not served.");
    out.push_str(&lost);
    header(
        out,
        "gpuhook_exporter_sample_age_seconds",
        "gauge",
        "Age of the values served for this GPU.",
    );
    out.push_str(&age);
    header(
        out,
        "gpuhook_exporter_sample_errors_total",
        "counter",
        "NVML samples of this GPU that failed (a lost GPU excluded).",
    );
    out.push_str(&errors);
    header(out, "gpuhook_exporter_field_refused", "gauge", "A field of the counters file that is not served, and why (profiling: needs DCGM's profiling module).");
    for r in &v.counters.refused {
        let _ = writeln!(
            out,
            "gpuhook_exporter_field_refused{{{}}} 1",
            pairs(&[("field", &r.name), ("reason", r.refusal.as_str())])
        );
    }
}
