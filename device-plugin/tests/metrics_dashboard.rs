//! `deploy/grafana/gpuhook-device-plugin.json` is a Grafana dashboard whose queries refer only to
//! metrics and labels the plugin's `/metrics` serves: the exported set is read from what
//! `usage::prometheus` renders for a small node (one free, one held, one unhealthy device), so a
//! renamed metric or label fails here rather than in an operator's empty panel.
//!
//! The shape checked is Grafana's dashboard JSON model (docs: "JSON model", `schemaVersion`,
//! `panels[].gridPos` on a 24-column grid, `targets[].refId`, `templating.list`).
// Test support: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};

use gpuhook_device_plugin::usage::{prometheus, DeviceUse, Usage, User};
use serde_json::Value;

type Exported = BTreeMap<String, BTreeSet<String>>;

fn device(id: &str, healthy: bool, users: Vec<User>) -> DeviceUse {
    DeviceUse {
        resource: "nvidia.com/gpu".into(),
        id: id.into(),
        uuid: "GPU-1".into(),
        gpu: 0,
        mig_uuid: None,
        replica: Some(0),
        model_name: "NVIDIA L20".into(),
        healthy: Some(healthy),
        users,
    }
}

/// Metric name → label names, from the plugin's own rendering.
fn exported() -> Exported {
    let held = User {
        pod: "p".into(),
        namespace: "n".into(),
        container: "c".into(),
    };
    let u = Usage {
        hostname: "node-1".into(),
        config: "default".into(),
        devices: vec![
            device("GPU-1::0", true, vec![held]),
            device("GPU-1::1", false, Vec::new()),
        ],
        unadvertised: Vec::new(),
        pod_resources_error: None,
    };
    let mut out = Exported::new();
    for line in prometheus(&u).lines().filter(|l| !l.starts_with('#')) {
        let (name, rest) = line.split_once('{').unwrap_or((line, ""));
        let name = name.split_whitespace().next().unwrap_or_default();
        let labels = rest.split('}').next().unwrap_or_default();
        let set = out.entry(name.to_string()).or_default();
        // Label values here are plain words without ',' or '='.
        for pair in labels.split(',').filter(|p| !p.is_empty()) {
            set.insert(pair.split('=').next().unwrap_or_default().to_string());
        }
    }
    out
}

/// PromQL operators and aggregations that look like names (the operator reference).
const KEYWORDS: [&str; 18] = [
    "bool", "and", "or", "unless", "offset", "sum", "min", "max", "avg", "group", "count", "topk",
    "bottomk", "quantile", "stddev", "stdvar", "inf", "nan",
];
/// Clauses whose parenthesis lists label names.
const GROUPING: &str = "by without on ignoring group_left group_right";

/// The expression as tokens: names, and single punctuation characters; string literals and
/// `[range]` selectors dropped (Grafana's `$variables` only appear inside them here).
fn tokens(expr: &str) -> Vec<String> {
    let (mut out, mut cur, mut skip_to) = (Vec::new(), String::new(), None::<char>);
    for c in expr.chars() {
        if let Some(end) = skip_to {
            if c == end {
                skip_to = None;
            }
            continue;
        }
        if c.is_ascii_alphanumeric() || c == '_' || c == ':' || c == '.' {
            cur.push(c);
            continue;
        }
        if !cur.is_empty() {
            out.push(std::mem::take(&mut cur));
        }
        match c {
            '"' => skip_to = Some('"'),
            '[' => skip_to = Some(']'),
            c if !c.is_whitespace() => out.push(c.to_string()),
            _ => {}
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

fn is_name(t: &str) -> bool {
    t.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
}

/// Problems of one expression against the exported set.
fn check_expr(exp: &Exported, expr: &str) -> Vec<String> {
    let t = tokens(expr);
    let (mut errs, mut metrics, mut grouped) = (Vec::new(), Vec::new(), Vec::new());
    let mut i = 0;
    while i < t.len() {
        let next = t.get(i + 1).map(String::as_str);
        if GROUPING.split(' ').any(|g| g == t[i]) && next == Some("(") {
            let end = t[i..]
                .iter()
                .position(|x| x == ")")
                .map_or(t.len(), |p| i + p);
            grouped.extend(t[i + 2..end].iter().filter(|x| is_name(x)).cloned());
            i = end;
        } else if t[i] == "{" {
            let end = t[i..]
                .iter()
                .position(|x| x == "}")
                .map_or(t.len(), |p| i + p);
            let metric: Option<&String> = metrics.last();
            for l in t[i + 1..end].iter().filter(|x| is_name(x)) {
                match metric.and_then(|m| exp.get(m.as_str())) {
                    Some(labels) if labels.contains(l) => {}
                    _ => errs.push(format!("{metric:?} has no label {l}")),
                }
            }
            i = end;
        } else if is_name(&t[i])
            && next != Some("(")
            && !KEYWORDS.contains(&t[i].to_lowercase().as_str())
        {
            if !exp.contains_key(&t[i]) {
                errs.push(format!("{} is not exported by the device plugin", t[i]));
            }
            metrics.push(t[i].clone());
        }
        i += 1;
    }
    if metrics.is_empty() {
        errs.push(format!("no metric in {expr:?}"));
    }
    for l in grouped {
        if !metrics
            .iter()
            .any(|m| exp.get(m).is_some_and(|s| s.contains(&l)))
        {
            errs.push(format!("no metric of {expr:?} has label {l}"));
        }
    }
    errs
}

const DASHBOARD: &str = include_str!("../../deploy/grafana/gpuhook-device-plugin.json");

fn dashboard() -> Value {
    serde_json::from_str(DASHBOARD).expect("deploy/grafana/gpuhook-device-plugin.json is JSON")
}

fn list<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    v[key].as_array().map_or(&[], Vec::as_slice)
}

/// A template variable's `label_values(metric, label)` as the query Grafana runs for it.
fn variable_query(q: &str) -> String {
    let args = q
        .strip_prefix("label_values(")
        .and_then(|q| q.strip_suffix(')'));
    match args.and_then(|a| a.split_once(',')) {
        Some((metric, label)) => format!("max by ({}) ({})", label.trim(), metric.trim()),
        None => panic!("variable query {q:?} is not label_values(metric, label)"),
    }
}

/// Every query, with where it is: panel targets, then template variables.
fn queries(d: &Value) -> Vec<(String, String)> {
    let targets = list(d, "panels").iter().flat_map(|p| {
        list(p, "targets").iter().map(move |t| {
            let expr = t["expr"].as_str().unwrap_or_default().to_string();
            (format!("panel {}", p["title"]), expr)
        })
    });
    let variables = list(&d["templating"], "list").iter().filter_map(|v| {
        let q = v["query"]["query"].as_str()?;
        Some((format!("variable {}", v["name"]), variable_query(q)))
    });
    targets.chain(variables).collect()
}

#[test]
fn every_query_uses_only_exported_metrics_and_labels() {
    let exp = exported();
    let qs = queries(&dashboard());
    assert!(qs.len() >= 8, "{qs:?}");
    let mut errs = Vec::new();
    for (place, e) in &qs {
        errs.extend(
            check_expr(&exp, e)
                .into_iter()
                .map(|x| format!("{place}: {x}")),
        );
    }
    assert_eq!(errs, Vec::<String>::new());
}

#[test]
fn dashboard_shows_every_metric_and_the_attribution_labels() {
    let exp = exported();
    assert_eq!(exp.len(), 3, "{exp:?}");
    let text: Vec<String> = queries(&dashboard()).into_iter().map(|(_, e)| e).collect();
    let all = text.join("\n");
    for m in exp.keys() {
        assert!(all.contains(m.as_str()), "no panel shows {m}");
    }
    // The unhealthy table names the GPU; the holders' table names the container.
    let by = |needle: &str, labels: &[&str]| {
        text.iter()
            .any(|e| e.contains(needle) && labels.iter().all(|l| e.contains(l)))
    };
    let gpu = ["UUID", "gpu", "modelName", "Hostname"];
    assert!(
        by("device_healthy", &gpu),
        "no unhealthy-device query by {gpu:?}"
    );
    let holder = ["namespace", "pod", "container", "device"];
    assert!(
        by("device_allocated", &holder),
        "no holder query by {holder:?}"
    );
}

/// What a panel lacks of Grafana's JSON model: a place on the 24-column grid, and (rows aside)
/// the `$datasource` variable and one distinct `refId` per query; a table wants table format.
fn panel_problems(p: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let g = &p["gridPos"];
    let size = ["h", "w", "x", "y"].map(|k| g[k].as_u64());
    match size {
        [Some(h), Some(w), Some(x), Some(_)] if h > 0 && w > 0 && x + w <= 24 => {}
        _ => out.push(format!("gridPos {g}")),
    }
    if p["type"] == "row" {
        return out;
    }
    if p["datasource"]["uid"] != "${datasource}" {
        out.push(format!("datasource {}", p["datasource"]));
    }
    let targets = list(p, "targets");
    let ref_ids: BTreeSet<&str> = targets.iter().filter_map(|t| t["refId"].as_str()).collect();
    if targets.is_empty() || ref_ids.len() != targets.len() {
        out.push("refIds missing or repeated".into());
    }
    if p["type"] == "table" && targets.iter().any(|t| t["format"] != "table") {
        out.push("table panel without table-format queries".into());
    }
    out
}

#[test]
fn dashboard_has_grafanas_json_model_shape() {
    let d = dashboard();
    let (title, uid) = (d["title"].as_str(), d["uid"].as_str());
    assert!(title.is_some_and(|t| !t.is_empty()), "title {title:?}");
    // Grafana limits a dashboard uid to 40 characters; schemaVersion 36 is Grafana 9.
    assert!(
        uid.is_some_and(|u| (1..=40).contains(&u.len())),
        "uid {uid:?}"
    );
    assert!(
        d["schemaVersion"].as_u64() >= Some(36),
        "{}",
        d["schemaVersion"]
    );
    let panels = list(&d, "panels");
    let ids: BTreeSet<u64> = panels.iter().filter_map(|p| p["id"].as_u64()).collect();
    assert_eq!(ids.len(), panels.len(), "panel ids missing or repeated");
    let problems: Vec<String> = panels
        .iter()
        .flat_map(|p| {
            panel_problems(p)
                .into_iter()
                .map(move |e| format!("{}: {e}", p["title"]))
        })
        .collect();
    assert_eq!(problems, Vec::<String>::new());
    let kinds: Vec<(&Value, &Value)> = list(&d["templating"], "list")
        .iter()
        .map(|v| (&v["name"], &v["type"]))
        .collect();
    assert!(
        kinds.contains(&(&"datasource".into(), &"datasource".into())),
        "{kinds:?}"
    );
}

#[test]
fn checker_rejects_what_the_plugin_does_not_export() {
    let exp = exported();
    let ok = r#"count by (Hostname, resource) (gpuhook_device_plugin_device_healthy{UUID=~"a{b}"} == 0) or vector(0)"#;
    assert_eq!(check_expr(&exp, ok), Vec::<String>::new());
    for (bad, why) in [
        ("gpuhook_device_plugin_devices", "not exported"),
        (
            r#"gpuhook_device_plugin_pod_resources_up{pod="x"}"#,
            "no label pod",
        ),
        (
            "sum by (uuid) (gpuhook_device_plugin_device_healthy)",
            "has label uuid",
        ),
        ("sum(rate(gpuhook_mps_ready[5m]))", "not exported"),
        ("vector(1)", "no metric"),
    ] {
        let errs = check_expr(&exp, bad);
        assert!(errs.iter().any(|e| e.contains(why)), "{bad}: {errs:?}");
    }
}
