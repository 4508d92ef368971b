//! Grafana dashboards against what the exporter serves: NVIDIA's "NVIDIA DCGM Exporter Dashboard"
//! (`grafana/dcgm-exporter-dashboard.json` of dcgm-exporter 4.5.3-4.8.2, unchanged) and our
//! per-pod view (`deploy/grafana/gpuhook-exporter-pods.json`). Every panel query and template
//! variable is parsed for metric names and the labels it matches, groups by or puts in a legend;
//! each must be served (Prometheus adds `instance` and `job` at scrape time). The only metric of
//! NVIDIA's dashboard not served is its profiling field, which the exporter refuses (and says so
//! in `gpuhook_exporter_field_refused`).
// Test support: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use common::*;
use serde_json::Value;

/// NVIDIA's dashboard, read where the reference material keeps it rather than copied into the
/// tree: `$GPUHOOK_DCGM_DASHBOARD`, else `shared/reference/dcgm-exporter/` next to the repository.
fn nvidia_dashboard() -> PathBuf {
    let candidates = [
        std::env::var_os("GPUHOOK_DCGM_DASHBOARD").map(PathBuf::from),
        Some(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/reference/dcgm-exporter")),
        Some(PathBuf::from("/work/shared/reference/dcgm-exporter")),
    ];
    candidates
        .into_iter()
        .flatten()
        .map(|p| {
            if p.is_dir() {
                p.join("dcgm-exporter-dashboard.json")
            } else {
                p
            }
        })
        .find(|p| p.is_file())
        .expect("NVIDIA's dcgm-exporter-dashboard.json not found: set GPUHOOK_DCGM_DASHBOARD")
}

const H100_0: &str = "GPU-054b5817-d8d5-cb0c-e645-7b685ed85ca6";

/// Metric names and label names a query uses.
#[derive(Debug, Default)]
struct Uses {
    metrics: BTreeSet<String>,
    labels: BTreeSet<String>,
}

const FUNCTIONS_AND_KEYWORDS: &[&str] = &[
    "sum",
    "avg",
    "min",
    "max",
    "count",
    "topk",
    "bottomk",
    "rate",
    "irate",
    "increase",
    "avg_over_time",
    "max_over_time",
    "min_over_time",
    "label_values",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "and",
    "or",
    "unless",
    "offset",
    "clamp_min",
    "clamp_max",
];

fn ident_at(s: &[char], i: usize) -> Option<(String, usize)> {
    let first = s.get(i)?;
    if !(first.is_ascii_alphabetic() || *first == '_') {
        return None;
    }
    let mut j = i;
    while s
        .get(j)
        .is_some_and(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
    {
        j += 1;
    }
    Some((s[i..j].iter().collect(), j))
}

fn skip_ws(s: &[char], mut i: usize) -> usize {
    while s.get(i).is_some_and(|c| c.is_whitespace()) {
        i += 1;
    }
    i
}

/// Label names of the matchers from `s[i]` (after `{`) to the closing `}`; returns the index
/// after it.
fn matchers(s: &[char], mut i: usize, u: &mut Uses) -> usize {
    while i < s.len() && s[i] != '}' {
        if let Some((name, j)) = ident_at(s, skip_ws(s, i)) {
            u.labels.insert(name);
            i = j;
        }
        while i < s.len() && s[i] != '"' && s[i] != '}' {
            i += 1;
        }
        if i < s.len() && s[i] == '"' {
            i = skip_string(s, i);
        }
        while i < s.len() && (s[i] == ',' || s[i].is_whitespace()) {
            i += 1;
        }
    }
    i + 1
}

/// The index after the string literal starting at `s[i]` (`"`).
fn skip_string(s: &[char], mut i: usize) -> usize {
    i += 1;
    while i < s.len() && s[i] != '"' {
        i += 1 + usize::from(s[i] == '\\');
    }
    i + 1
}

/// Parses a PromQL expression (the subset dashboards use) or `label_values(metric, label)`.
fn uses(expr: &str) -> Uses {
    let s: Vec<char> = expr.chars().collect();
    let mut u = Uses::default();
    let mut i = 0;
    while i < s.len() {
        match s[i] {
            '"' => i = skip_string(&s, i),
            '[' => {
                i = s[i..]
                    .iter()
                    .position(|c| *c == ']')
                    .map_or(s.len(), |p| i + p + 1)
            }
            '{' => i = matchers(&s, i + 1, &mut u),
            c if c.is_ascii_alphabetic() || c == '_' => {
                let (tok, j) = ident_at(&s, i).unwrap();
                let next = skip_ws(&s, j);
                if [
                    "by",
                    "without",
                    "on",
                    "ignoring",
                    "group_left",
                    "group_right",
                ]
                .contains(&tok.as_str())
                    && s.get(next) == Some(&'(')
                {
                    let end = s[next..]
                        .iter()
                        .position(|c| *c == ')')
                        .map_or(s.len(), |p| next + p);
                    let inner: String = s[next + 1..end].iter().collect();
                    u.labels.extend(
                        inner
                            .split(',')
                            .map(|l| l.trim().to_string())
                            .filter(|l| !l.is_empty()),
                    );
                    i = end + 1;
                    continue;
                }
                if tok == "label_values" {
                    let end = s[next..]
                        .iter()
                        .position(|c| *c == ')')
                        .map_or(s.len(), |p| next + p);
                    let inner: String = s[next + 1..end].iter().collect();
                    let parts: Vec<&str> = inner.split(',').map(str::trim).collect();
                    if let [m, l] = parts[..] {
                        u.metrics.insert(m.to_string());
                        u.labels.insert(l.to_string());
                    }
                    i = end + 1;
                    continue;
                }
                if !FUNCTIONS_AND_KEYWORDS.contains(&tok.as_str()) && s.get(next) != Some(&'(') {
                    u.metrics.insert(tok);
                }
                i = j;
            }
            _ => i += 1,
        }
    }
    u
}

/// `{{label}}` names of a legend format.
fn legend_labels(fmt: &str) -> Vec<String> {
    fmt.split("{{")
        .skip(1)
        .filter_map(|p| p.split_once("}}"))
        .map(|(l, _)| l.trim().to_string())
        .collect()
}

/// Every query of a dashboard: (where, expression, legend labels).
fn queries(dash: &Value) -> Vec<(String, String, Vec<String>)> {
    let mut out = Vec::new();
    for p in dash["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().into_iter().flatten() {
            let legend = legend_labels(t["legendFormat"].as_str().unwrap_or(""));
            out.push((
                p["title"].as_str().unwrap_or("?").to_string(),
                t["expr"].as_str().unwrap().to_string(),
                legend,
            ));
        }
    }
    for v in dash["templating"]["list"].as_array().into_iter().flatten() {
        if let Some(q) = v["query"]
            .as_str()
            .or(v["query"]["query"].as_str())
            .filter(|q| q.contains('('))
        {
            out.push((format!("variable {}", v["name"]), q.to_string(), Vec::new()));
        }
    }
    out
}

/// Checks a dashboard; returns the metrics it uses that are not served.
fn unserved(dash: &Value, page: &Page) -> BTreeSet<String> {
    let mut served: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for s in &page.series {
        let e = served.entry(s.name.as_str()).or_default();
        e.extend(s.labels.iter().map(|(k, _)| k.as_str()));
        e.extend(["instance", "job"]);
    }
    let mut missing = BTreeSet::new();
    let qs = queries(dash);
    assert!(!qs.is_empty());
    for (place, expr, legend) in qs {
        let u = uses(&expr);
        assert!(!u.metrics.is_empty(), "{place}: no metric in {expr}");
        for m in &u.metrics {
            let Some(labels) = served.get(m.as_str()) else {
                missing.insert(m.clone());
                continue;
            };
            for l in u.labels.iter().chain(&legend) {
                assert!(
                    labels.contains(l.as_str()),
                    "{place}: {m} has no label {l} ({expr})"
                );
            }
        }
    }
    missing
}

fn load(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn nvidia_dashboard_and_the_per_pod_view_query_only_what_is_served() {
    let node = Node::new("dgx-h100");
    let proc_root = node.dir.path().join("proc");
    let a = cid('a');
    fake_proc(
        &proc_root,
        1001,
        &pod_cgroup("11111111-2222-3333-4444-555555555555", &a),
    );
    node.state(&format!("processes-{H100_0}"), "1001 compute 2000 30\n");
    node.state(&format!("telemetry-{H100_0}"), "gpu_util 50\n");
    let state = start_in_process(&node, &["-k", "-c", "100"]);
    name_pods(&state, &[(&a, "team", "a", "main")]);
    let page = page_when(&state, |p| {
        p.of("gpuhook_pod_gpu_util").count() >= 2 && p.of("DCGM_FI_DEV_GPU_TEMP").count() == 8
    });

    let nvidia = load(&nvidia_dashboard());
    let missing = unserved(&nvidia, &page);
    assert_eq!(
        missing,
        BTreeSet::from(["DCGM_FI_PROF_PIPE_TENSOR_ACTIVE".to_string()])
    );
    page.one(
        "gpuhook_exporter_field_refused",
        &[("field", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE")],
    );

    let ours = load(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/grafana/gpuhook-exporter-pods.json"),
    );
    assert_eq!(unserved(&ours, &page), BTreeSet::new());
}

#[test]
fn the_query_parser_finds_metrics_and_labels() {
    let u = uses(
        r#"sum by (namespace, pod) (avg_over_time(gpuhook_pod_gpu_util{instance=~"$instance", pod!=""}[5m])) / on(gpu) X"#,
    );
    assert_eq!(
        u.metrics,
        BTreeSet::from(["gpuhook_pod_gpu_util".into(), "X".into()])
    );
    assert_eq!(
        u.labels,
        BTreeSet::from([
            "namespace".into(),
            "pod".into(),
            "instance".into(),
            "gpu".into()
        ])
    );
    let u = uses("label_values(DCGM_FI_DEV_GPU_TEMP, gpu)");
    assert_eq!(u.metrics, BTreeSet::from(["DCGM_FI_DEV_GPU_TEMP".into()]));
}
