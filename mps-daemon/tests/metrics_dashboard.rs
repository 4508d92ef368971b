//! `deploy/grafana/gpuhook-mps.json` is a Grafana dashboard whose queries refer only to metrics
//! and labels that gpu-mps-daemon exports, as its own registry (`metrics_registry::FAMILIES`)
//! lists them, and never to a deprecated name.
//!
//! The shape checked is Grafana's dashboard JSON model (docs: "JSON model", dashboard
//! `schemaVersion`, `panels[].gridPos` on a 24-column grid, `targets[].refId`, `templating.list`).
// Test support: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

use gpu_mps_daemon::metrics_registry::{self as reg, family_of_sample, FAMILIES};
use serde_json::Value;

/// Metrics of other exporters the dashboard joins with, and their labels: dcgm-exporter's
/// `etc/default-counters.csv` exports `DCGM_FI_DEV_GPU_UTIL` by default, with the GPU labels of
/// `render_metrics.go`; kube-state-metrics' `docs/pod-metrics.md` lists
/// `kube_pod_container_info{container, pod, namespace, image, image_id, container_id}`.
const EXTERNAL: [(&str, &[&str]); 2] = [
    // The first six of GPU_LABELS are dcgm-exporter's (tests/metrics_labels.rs checks them).
    ("DCGM_FI_DEV_GPU_UTIL", reg::GPU_LABELS.split_at(6).0),
    (
        "kube_pod_container_info",
        &[
            "container",
            "pod",
            "namespace",
            "image",
            "image_id",
            "container_id",
        ],
    ),
];

fn external(m: &str) -> Option<&'static [&'static str]> {
    EXTERNAL.iter().find(|(n, _)| *n == m).map(|(_, l)| *l)
}

/// What a PromQL expression refers to.
#[derive(Debug, Default)]
struct Refs {
    metrics: Vec<String>,
    /// Labels in `{...}` matchers, with the metric they follow.
    matchers: Vec<(String, String)>,
    /// Labels in `by`, `without`, `on`, `ignoring`, `group_left`, `group_right` clauses.
    grouping: Vec<String>,
}

const GROUPING: [&str; 6] = [
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];
/// Binary operators, modifiers and aggregation operators (which may be followed by `by (...)`
/// before their parenthesis), from the PromQL operator reference.
const KEYWORDS: [&str; 19] = [
    "bool",
    "and",
    "or",
    "unless",
    "offset",
    "inf",
    "nan",
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
];

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':'
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// Index after the closing `close` of a group that starts at `start` (its opening char).
fn skip_group(b: &[char], start: usize, close: char) -> usize {
    let mut i = start;
    let mut in_str = false;
    while i < b.len() {
        match b[i] {
            '\\' if in_str => i += 1,
            '"' => in_str = !in_str,
            c if c == close && !in_str => return i + 1,
            _ => {}
        }
        i += 1;
    }
    b.len()
}

fn names_in(s: &[char]) -> Vec<String> {
    s.iter()
        .collect::<String>()
        .split(|c: char| !is_ident(c))
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect()
}

/// Label names of a `{a="x", b=~"y"}` block (`b` is its content without braces).
fn matcher_labels(b: &[char]) -> Vec<String> {
    let (mut out, mut i) = (Vec::new(), 0);
    while i < b.len() {
        if b[i] == '"' {
            i = skip_group(b, i + 1, '"');
        } else if is_ident_start(b[i]) {
            let s = i;
            while i < b.len() && is_ident(b[i]) {
                i += 1;
            }
            out.push(b[s..i].iter().collect());
        } else {
            i += 1;
        }
    }
    out
}

fn scan(expr: &str) -> Refs {
    let b: Vec<char> = expr.chars().collect();
    let mut r = Refs::default();
    let mut last_metric = String::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_digit() || c == '.' {
            while i < b.len() && (is_ident(b[i]) || b[i] == '.') {
                i += 1;
            }
        } else if c == '"' {
            i = skip_group(&b, i + 1, '"');
        } else if c == '[' {
            i = skip_group(&b, i + 1, ']');
        } else if c == '{' {
            let end = skip_group(&b, i + 1, '}');
            for l in matcher_labels(&b[i + 1..end - 1]) {
                r.matchers.push((last_metric.clone(), l));
            }
            i = end;
        } else if is_ident_start(c) {
            let s = i;
            while i < b.len() && is_ident(b[i]) {
                i += 1;
            }
            let word: String = b[s..i].iter().collect();
            let mut j = i;
            while j < b.len() && b[j] == ' ' {
                j += 1;
            }
            let call = j < b.len() && b[j] == '(';
            if GROUPING.contains(&word.as_str()) && call {
                let end = skip_group(&b, j + 1, ')');
                r.grouping.extend(names_in(&b[j + 1..end - 1]));
                i = end;
            } else if !call && !KEYWORDS.contains(&word.to_lowercase().as_str()) {
                last_metric = word.clone();
                r.metrics.push(word);
            }
        } else {
            i += 1;
        }
    }
    r
}

/// Problems of one expression against the registry.
fn check_expr(expr: &str) -> Vec<String> {
    let r = scan(expr);
    let mut errs = Vec::new();
    let mut known: BTreeSet<&str> = BTreeSet::new();
    for m in &r.metrics {
        match (family_of_sample(m), external(m)) {
            (Some(f), _) if f.replaced_by.is_some() => errs.push(format!("{m} is deprecated")),
            (Some(f), _) => known.extend(f.all_labels()),
            (None, Some(labels)) => known.extend(labels),
            (None, None) => errs.push(format!("{m} is not exported by gpu-mps-daemon")),
        }
    }
    if r.metrics.is_empty() {
        errs.push(format!("no metric in {expr:?}"));
    }
    for (m, l) in &r.matchers {
        if let Some(f) = family_of_sample(m) {
            if !f.all_labels().contains(&l.as_str()) {
                errs.push(format!("{m} has no label {l}"));
            }
        }
    }
    for l in &r.grouping {
        if !known.contains(l.as_str()) {
            errs.push(format!("no metric of {expr:?} has label {l}"));
        }
    }
    errs
}

fn dashboard() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/grafana/gpuhook-mps.json"
    );
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Every query of the dashboard: panel targets and template variable queries.
fn queries(d: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for p in d["panels"].as_array().into_iter().flatten() {
        for t in p["targets"].as_array().into_iter().flatten() {
            let expr = t["expr"].as_str().unwrap_or_default();
            out.push((p["title"].as_str().unwrap_or_default().into(), expr.into()));
        }
    }
    for v in d["templating"]["list"].as_array().into_iter().flatten() {
        if let Some(q) = v["query"]["query"].as_str() {
            let inner = q
                .strip_prefix("label_values(")
                .and_then(|q| q.strip_suffix(')'))
                .and_then(|q| q.split_once(','));
            let (metric, label) = inner.unwrap_or_else(|| panic!("unexpected variable query {q}"));
            let expr = format!("max by ({}) ({})", label.trim(), metric.trim());
            out.push((format!("variable {}", v["name"]), expr));
        }
    }
    out
}

#[test]
fn every_query_uses_only_exported_metrics_and_labels() {
    let d = dashboard();
    let qs = queries(&d);
    assert!(qs.len() >= 10, "{qs:?}");
    let errs: Vec<String> = qs
        .iter()
        .flat_map(|(title, e)| {
            check_expr(e)
                .into_iter()
                .map(move |x| format!("{title}: {x}"))
        })
        .collect();
    assert!(errs.is_empty(), "{errs:#?}");
}

#[test]
fn dashboard_covers_the_mps_daemon_topics() {
    let d = dashboard();
    let used: BTreeSet<String> = queries(&d)
        .iter()
        .flat_map(|(_, e)| scan(e).metrics)
        .filter_map(|m| family_of_sample(&m).map(|f| f.name.to_string()))
        .collect();
    for f in [
        reg::READY,
        reg::RESTARTS,
        reg::ACTIVE_THREAD_RATIO,
        reg::PINNED_MEMORY_LIMIT,
        reg::LIMIT_DRIFT,
        reg::CONTAINER_CLIENTS,
        reg::COMMAND_DURATION,
    ] {
        assert!(used.contains(f.name), "no panel shows {}", f.name);
    }
    let current = FAMILIES.iter().filter(|f| f.replaced_by.is_none()).count();
    assert!(used.len() >= current - 1, "{used:?}");
}

#[test]
fn dashboard_has_grafanas_json_model_shape() {
    let d = dashboard();
    assert!(d["title"].as_str().is_some_and(|t| !t.is_empty()));
    let uid = d["uid"].as_str().unwrap_or_default();
    assert!(!uid.is_empty() && uid.len() <= 40, "uid {uid:?}");
    assert!(d["schemaVersion"].as_u64().is_some_and(|v| v >= 36));
    let panels = d["panels"].as_array().expect("panels array");
    let mut ids = BTreeSet::new();
    for p in panels {
        let title = p["title"].as_str().expect("panel title");
        assert!(
            ids.insert(p["id"].as_u64().expect("panel id")),
            "{title}: id repeated"
        );
        let g = &p["gridPos"];
        let [h, w, x, _y] = ["h", "w", "x", "y"].map(|k| {
            g[k].as_u64()
                .unwrap_or_else(|| panic!("{title}: gridPos.{k}"))
        });
        assert!(h > 0 && w > 0 && x + w <= 24, "{title}: {g}");
        let ty = p["type"].as_str().expect("panel type");
        if ty == "row" {
            continue;
        }
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{title}");
        let targets = p["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{title}: no query");
        let refs: BTreeSet<&str> = targets.iter().filter_map(|t| t["refId"].as_str()).collect();
        assert_eq!(
            refs.len(),
            targets.len(),
            "{title}: refIds missing or repeated"
        );
    }
    let vars = d["templating"]["list"].as_array().expect("templating.list");
    assert!(vars
        .iter()
        .any(|v| v["name"] == "datasource" && v["type"] == "datasource"));
}

#[test]
fn checker_rejects_what_the_daemon_does_not_export() {
    assert!(
        check_expr("sum by (gpu) (rate(gpuhook_mps_command_duration_seconds_bucket[5m]))")
            .is_empty()
    );
    assert!(check_expr(r#"gpuhook_mps_ready{Hostname=~"a{b}", UUID!="x"} == 0"#).is_empty());
    for (bad, why) in [
        ("gpuhook_mps_nope", "not exported"),
        ("gpuhook_mps_active_thread_percentage", "deprecated"),
        ("gpuhook_mps_clients_per_container", "deprecated"),
        (r#"gpuhook_mps_ready{pod="x"}"#, "no label pod"),
        (
            "sum by (namespace) (gpuhook_mps_ready)",
            "has label namespace",
        ),
        ("gpuhook_mps_command_duration_seconds", "not exported"),
        ("sum(rate(gpuhook_mps_ready_bucket[5m]))", "not exported"),
        (
            "gpuhook_mps_ready * on (UUID) group_left (pod_uid) kube_pod_container_info",
            "has label pod_uid",
        ),
    ] {
        let errs = check_expr(bad);
        assert!(errs.iter().any(|e| e.contains(why)), "{bad}: {errs:?}");
    }
}
