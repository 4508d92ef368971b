//! A fake API server (HTTP/1.1 on 127.0.0.1) for ResourceClaims, Pods (GET) and ResourceSlices that
//! refuses what a real one refuses (dra-facts §3: `validation.go` limits; the node
//! authorizer's rule that a node's plugin writes only that node's slices), written apart from
//! the plugin's own checks so they cannot agree by construction.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

#[derive(Debug, Default)]
pub struct State {
    pub claims: BTreeMap<(String, String), Value>,
    pub pods: BTreeMap<(String, String), Value>,
    pub slices: BTreeMap<String, Value>,
    /// (method, path) of every request.
    pub log: Vec<(String, String)>,
    /// Refusals (status, message).
    pub refused: Vec<(u16, String)>,
    next_rv: u64,
}

#[derive(Debug, Clone)]
pub struct ApiServer {
    pub url: String,
    pub node: String,
    pub state: Arc<Mutex<State>>,
}

fn label(s: &str, max: usize) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn qualified(name: &str) -> bool {
    let id = |s: &str| {
        !s.is_empty()
            && s.len() <= 32
            && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !s.starts_with(|c: char| c.is_ascii_digit())
    };
    match name.split_once('/') {
        None => id(name),
        Some((d, n)) => d.len() <= 63 && d.split('.').all(|l| label(l, 63)) && id(n),
    }
}

/// What resource.k8s.io/v1 validation refuses in a slice.
pub fn validate_slice(s: &Value, node: &str) -> Result<(), (u16, String)> {
    let bad = |m: String| Err((422, m));
    let spec = &s["spec"];
    if spec["nodeName"] != node {
        return Err((
            403,
            format!(
                "node {node} may not write a slice of node {}",
                spec["nodeName"]
            ),
        ));
    }
    let placements = [
        "nodeName",
        "nodeSelector",
        "allNodes",
        "perDeviceNodeSelection",
    ]
    .iter()
    .filter(|k| !spec[**k].is_null())
    .count();
    if placements != 1 {
        return bad(
            "exactly one of nodeName, nodeSelector, allNodes, perDeviceNodeSelection".into(),
        );
    }
    let name = s["metadata"]["name"].as_str().unwrap_or("");
    if name.is_empty() || name.len() > 253 || !name.split('.').all(|l| label(l, 63)) {
        return bad(format!("metadata.name {name:?}"));
    }
    let driver = spec["driver"].as_str().unwrap_or("");
    if driver.len() > 63 || !driver.split('.').all(|l| label(l, 63)) {
        return bad(format!("spec.driver {driver:?}"));
    }
    let pool = &spec["pool"];
    if pool["name"].as_str().is_none_or(str::is_empty)
        || pool["resourceSliceCount"].as_i64().is_none_or(|n| n < 1)
        || pool["generation"].as_i64().is_none()
    {
        return bad("spec.pool".into());
    }
    let devices = spec["devices"].as_array().cloned().unwrap_or_default();
    let sets = spec["sharedCounters"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if !devices.is_empty() && !sets.is_empty() {
        return bad("only one of devices and sharedCounters can be set".into());
    }
    if sets.len() > 8 {
        return bad("spec.sharedCounters: must have at most 8 items".into());
    }
    for set in &sets {
        validate_counters(set, "name")?;
    }
    let limited = devices
        .iter()
        .any(|d| !d["taints"].is_null() || !d["consumesCounters"].is_null());
    let max = if limited { 64 } else { 128 };
    if devices.len() > max {
        return bad(format!("spec.devices: must have at most {max} items"));
    }
    devices.iter().try_for_each(validate_device)
}

/// A CounterSet (`name`) or DeviceCounterConsumption (`counterSet`): a DNS label naming the
/// set, 1 to 32 counters named by DNS labels, each with a quantity string `value`.
fn validate_counters(c: &Value, key: &str) -> Result<(), (u16, String)> {
    let set = c[key].as_str().unwrap_or("");
    if !label(set, 63) {
        return Err((422, format!("counter set {key} {set:?}")));
    }
    let counters = c["counters"].as_object().cloned().unwrap_or_default();
    if counters.is_empty() || counters.len() > 32 {
        return Err((422, format!("{set}: counters must have 1 to 32 items")));
    }
    match counters
        .iter()
        .find(|(k, v)| !label(k, 63) || v["value"].as_str().is_none())
    {
        Some((k, _)) => Err((422, format!("{set}: counter {k:?}"))),
        None => Ok(()),
    }
}

/// What validation refuses in one device.
fn validate_device(d: &Value) -> Result<(), (u16, String)> {
    let bad = |m: String| Err((422, m));
    let dn = d["name"].as_str().unwrap_or("");
    if !label(dn, 63) {
        return bad(format!("device name {dn:?}"));
    }
    let attrs = d["attributes"].as_object().cloned().unwrap_or_default();
    let caps = d["capacity"].as_object().cloned().unwrap_or_default();
    if attrs.len() + caps.len() > 32 {
        return bad(format!("{dn}: more than 32 attributes and capacities"));
    }
    for (k, v) in attrs.iter() {
        if !qualified(k) {
            return bad(format!("{dn}: attribute name {k:?}"));
        }
        let set = ["int", "bool", "string", "version"]
            .iter()
            .filter(|t| !v[**t].is_null())
            .count();
        if set != 1 || v.as_object().map_or(0, |o| o.len()) != 1 {
            return bad(format!("{dn}: attribute {k} must have exactly one value"));
        }
        if v["string"].as_str().is_some_and(|s| s.len() > 64) {
            return bad(format!("{dn}: attribute {k}: at most 64 characters"));
        }
        if let Some(ver) = v["version"].as_str() {
            let parts: Vec<&str> = ver.split('.').collect();
            if parts.len() != 3
                || parts
                    .iter()
                    .any(|p| p.parse::<u64>().is_err() || (p.len() > 1 && p.starts_with('0')))
            {
                return bad(format!(
                    "{dn}: attribute {k}: {ver:?} is not a semantic version"
                ));
            }
        }
    }
    for (k, v) in caps.iter() {
        if !qualified(k) || v["value"].as_str().is_none() {
            return bad(format!("{dn}: capacity {k}"));
        }
    }
    let consumes = d["consumesCounters"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if consumes.len() > 2 {
        return bad(format!("{dn}: consumesCounters: must have at most 2 items"));
    }
    for c in &consumes {
        validate_counters(c, "counterSet")?;
    }
    if d["taints"].as_array().is_some_and(|t| t.len() > 16) {
        return bad(format!("{dn}: more than 16 taints"));
    }
    Ok(())
}

fn respond(stream: &mut TcpStream, status: u16, body: &Value) {
    let text = body.to_string();
    let _ = write!(
        stream,
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
        text.len()
    );
}

fn handle(
    state: &Arc<Mutex<State>>,
    node: &str,
    method: &str,
    path: &str,
    body: &[u8],
) -> (u16, Value) {
    let mut st = state.lock().unwrap();
    st.log.push((method.to_string(), path.to_string()));
    const V1: &str = "/apis/resource.k8s.io/v1";
    let status = |code: u16, msg: String| {
        (
            code,
            json!({"kind": "Status", "code": code, "message": msg}),
        )
    };
    if let Some(rest) = path.strip_prefix("/api/v1/namespaces/") {
        if let ([ns, "pods", name], "GET") =
            (rest.split('/').collect::<Vec<_>>().as_slice(), method)
        {
            return match st.pods.get(&(ns.to_string(), name.to_string())) {
                Some(p) => (200, p.clone()),
                None => status(404, format!("pods {name:?} not found")),
            };
        }
    }
    if let Some(rest) = path.strip_prefix(&format!("{V1}/namespaces/")) {
        let parts: Vec<&str> = rest.split('/').collect();
        if let [ns, "resourceclaims", name] = parts.as_slice() {
            return match st.claims.get(&(ns.to_string(), name.to_string())) {
                Some(c) => (200, c.clone()),
                None => status(404, format!("resourceclaims {name:?} not found")),
            };
        }
    }
    handle_slices(&mut st, node, method, path, body)
}

/// The resourceslices routes.
fn handle_slices(
    st: &mut State,
    node: &str,
    method: &str,
    path: &str,
    body: &[u8],
) -> (u16, Value) {
    const V1: &str = "/apis/resource.k8s.io/v1";
    let status = |code: u16, msg: String| {
        (
            code,
            json!({"kind": "Status", "code": code, "message": msg}),
        )
    };
    let Some(rest) = path.strip_prefix(&format!("{V1}/resourceslices")) else {
        return status(404, format!("no route {path}"));
    };
    let (tail, query) = rest.split_once('?').unwrap_or((rest, ""));
    let name = tail.trim_start_matches('/').to_string();
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    match (method, name.is_empty()) {
        ("GET", true) => {
            let q = query.replace("%3D", "=").replace("%2C", ",");
            let want_node = q
                .split(',')
                .find_map(|p| p.split_once("spec.nodeName=").map(|x| x.1.to_string()));
            let items: Vec<Value> = st
                .slices
                .values()
                .filter(|s| {
                    want_node
                        .as_deref()
                        .is_none_or(|n| s["spec"]["nodeName"] == n)
                })
                .cloned()
                .collect();
            (200, json!({"kind": "ResourceSliceList", "items": items}))
        }
        ("POST", true) | ("PUT", false) => {
            let Some(mut s) = parsed else {
                return status(400, "bad JSON".into());
            };
            if let Err((code, m)) = validate_slice(&s, node) {
                st.refused.push((code, m.clone()));
                return status(code, m);
            }
            let n = s["metadata"]["name"].as_str().unwrap_or("").to_string();
            if method == "POST" && st.slices.contains_key(&n) {
                return status(409, format!("{n} already exists"));
            }
            if method == "PUT" {
                if n != name {
                    return status(400, "name mismatch".into());
                }
                let Some(old) = st.slices.get(&n) else {
                    return status(404, format!("{n} not found"));
                };
                if old["metadata"]["resourceVersion"] != s["metadata"]["resourceVersion"] {
                    return status(409, "resourceVersion conflict".into());
                }
            }
            st.next_rv += 1;
            s["metadata"]["resourceVersion"] = json!(st.next_rv.to_string());
            st.slices.insert(n, s.clone());
            (if method == "POST" { 201 } else { 200 }, s)
        }
        ("DELETE", false) => match st.slices.get(&name) {
            Some(s) if s["spec"]["nodeName"] != node => status(403, "not this node's slice".into()),
            Some(_) => {
                st.slices.remove(&name);
                status(200, "deleted".into())
            }
            None => status(404, "not found".into()),
        },
        _ => status(405, format!("{method} {path}")),
    }
}

fn serve_one(state: &Arc<Mutex<State>>, node: &str, stream: TcpStream) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() {
        return;
    }
    let mut parts = line.split_whitespace();
    let (method, path) = (
        parts.next().unwrap_or("").to_string(),
        parts.next().unwrap_or("").to_string(),
    );
    let mut len = 0usize;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).is_err() || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                len = v.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0u8; len];
    let _ = reader.read_exact(&mut body);
    let (code, v) = handle(state, node, &method, &path, &body);
    let mut stream = stream;
    respond(&mut stream, code, &v);
}

impl ApiServer {
    /// Serves on a free port for `node`'s plugin, in a thread.
    pub fn start(node: &str) -> ApiServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let state = Arc::new(Mutex::new(State::default()));
        let (st, n) = (state.clone(), node.to_string());
        std::thread::spawn(move || {
            for s in listener.incoming().flatten() {
                serve_one(&st, &n, s);
            }
        });
        ApiServer {
            url,
            node: node.into(),
            state,
        }
    }

    pub fn add_claim(&self, claim: Value) {
        let ns = claim["metadata"]["namespace"].as_str().unwrap().to_string();
        let name = claim["metadata"]["name"].as_str().unwrap().to_string();
        self.state.lock().unwrap().claims.insert((ns, name), claim);
    }

    pub fn add_pod(&self, pod: Value) {
        let ns = pod["metadata"]["namespace"].as_str().unwrap().to_string();
        let name = pod["metadata"]["name"].as_str().unwrap().to_string();
        self.state.lock().unwrap().pods.insert((ns, name), pod);
    }

    pub fn slices(&self) -> Vec<Value> {
        self.state
            .lock()
            .unwrap()
            .slices
            .values()
            .cloned()
            .collect()
    }
}
