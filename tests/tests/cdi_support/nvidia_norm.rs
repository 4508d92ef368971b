//! The normalised form `scripts/compare-nvidia-ctk.sh` gives a spec (its `NORMALISE` jq program),
//! in Rust, so a test can hold gpuhook's spec against NVIDIA's recorded output
//! (`tests/expectations/nvidia-ctk/<profile>.json`) without NVIDIA's binaries.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

fn strip<'a>(root: &str, p: &'a str) -> &'a str {
    p.strip_prefix(root).unwrap_or(p)
}

fn node(root: &str, n: &Value) -> String {
    let path = n["path"].as_str().unwrap_or_default();
    let mode = n["fileMode"]
        .as_u64()
        .map_or("-".to_string(), |m| format!("0{m:o}"));
    let host = n["hostPath"].as_str().unwrap_or(path);
    format!(
        "{path} {}:{} mode={mode} host={}",
        n["major"].as_u64().unwrap_or(0),
        n["minor"].as_u64().unwrap_or(0),
        strip(root, host)
    )
}

fn nodes(root: &str, edits: &Value) -> Vec<String> {
    let mut out: Vec<String> = edits["deviceNodes"]
        .as_array()
        .map(|a| a.iter().map(|n| node(root, n)).collect())
        .unwrap_or_default();
    out.sort();
    out
}

fn norm_path(p: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for c in p.split('/') {
        match c {
            ".." => {
                parts.pop();
            }
            "." | "" => {}
            c => parts.push(c),
        }
    }
    format!("/{}", parts.join("/"))
}

fn link(spec: &str) -> String {
    let (target, link) = spec.split_once("::").unwrap_or((spec, ""));
    let abs = if target.starts_with('/') {
        target.to_string()
    } else {
        let dir = link.rsplit_once('/').map_or("", |(d, _)| d);
        format!("{dir}/{target}")
    };
    format!("{link} -> {}", norm_path(&abs))
}

fn hook_args(h: &Value) -> Vec<String> {
    let args: Vec<String> = h["args"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let rest = args.get(1..).unwrap_or_default();
    match rest.first().map(String::as_str) {
        Some("hook") => rest[1..].to_vec(),
        _ => rest.to_vec(),
    }
}

fn flag_values(args: &[String], flag: &str) -> Vec<String> {
    args.windows(2)
        .filter(|w| w[0] == flag)
        .map(|w| w[1].clone())
        .collect()
}

/// gpuhook's setup-hook flags as NVIDIA's hook actions.
fn actions(args: &[String]) -> Vec<String> {
    if args.first().map(String::as_str) != Some("setup") {
        return args.first().cloned().into_iter().collect();
    }
    args[1..]
        .iter()
        .filter(|a| a.starts_with("--"))
        .map(|a| {
            match a.as_str() {
                "--link" => "create-symlinks",
                "--folder" => "update-ldcache",
                "--disable-device-node-modification" => "disable-device-node-modification",
                "--cuda-compat-host-driver-version" => "enable-cuda-compat",
                "--application-profile" => "update-application-profile",
                other => return format!("setup:{other}"),
            }
            .to_string()
        })
        .collect()
}

fn set(v: impl IntoIterator<Item = String>) -> Value {
    let s: BTreeSet<String> = v.into_iter().collect();
    Value::from(s.into_iter().collect::<Vec<_>>())
}

/// The normalised form of `spec` generated on a node materialised at `root`.
pub fn normalise(spec: &Value, root: &str) -> Value {
    let common = &spec["containerEdits"];
    let hooks: Vec<&Value> = common["hooks"]
        .as_array()
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    let devices: BTreeMap<String, Value> = spec["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["name"].as_str().unwrap().to_string(),
                Value::from(nodes(root, &d["containerEdits"])),
            )
        })
        .collect();
    let mounts = common["mounts"].as_array().into_iter().flatten().map(|m| {
        let mut opts: Vec<&str> = m["options"]
            .as_array()
            .map(|o| o.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        opts.sort_unstable();
        format!(
            "{} <- {} [{}]",
            m["containerPath"].as_str().unwrap_or_default(),
            strip(root, m["hostPath"].as_str().unwrap_or_default()),
            opts.join(",")
        )
    });
    let hook_args: Vec<Vec<String>> = hooks.iter().map(|h| hook_args(h)).collect();
    serde_json::json!({
        "cdiVersion": spec["cdiVersion"],
        "kind": spec["kind"],
        "devices": devices,
        "common_nodes": nodes(root, common),
        "mounts": set(mounts),
        "links": set(hook_args.iter().flat_map(|a| flag_values(a, "--link")).map(|l| link(&l))),
        "ldcache_folders": set(hook_args.iter().flat_map(|a| flag_values(a, "--folder"))),
        "hook_actions": set(hook_args.iter().flat_map(|a| actions(a))),
        "hooks_without_env": set(hooks.iter().filter(|h| h["env"].as_array().is_none_or(|e| e.is_empty())).map(|h| h["path"].as_str().unwrap_or_default().to_string())),
        "env": set(common["env"].as_array().into_iter().flatten().filter_map(|e| e.as_str().map(str::to_string))),
    })
}
