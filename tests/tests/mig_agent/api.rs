//! A fake Kubernetes API server on 127.0.0.1 holding one Node: `GET /api/v1/nodes/<node>`, JSON
//! merge `PATCH` of it (RFC 7386, as the API server applies `application/merge-patch+json`),
//! `POST` of Events. Every PATCH body and Event is recorded; `on_patch` sees the Node after each
//! PATCH (the test plays the DaemonSet controller with it).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

type OnPatch = dyn Fn(&Value) + Send + Sync;

#[derive(Default)]
pub struct State {
    pub node: Value,
    pub patches: Vec<Value>,
    pub events: Vec<Value>,
}

#[derive(Clone)]
pub struct FakeApi {
    pub url: String,
    pub state: Arc<Mutex<State>>,
}

/// RFC 7386 merge.
pub fn merge(target: &mut Value, patch: &Value) {
    let Some(p) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let t = target.as_object_mut().unwrap();
    for (k, v) in p {
        if v.is_null() {
            t.remove(k);
        } else {
            merge(t.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

impl FakeApi {
    pub fn start(
        node: &str,
        labels: Value,
        on_patch: impl Fn(&Value) + Send + Sync + 'static,
    ) -> FakeApi {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let state = Arc::new(Mutex::new(State {
            node: json!({"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": node, "labels": labels, "annotations": {}}}),
            ..State::default()
        }));
        let (s, name) = (state.clone(), node.to_string());
        let on_patch: Arc<OnPatch> = Arc::new(on_patch);
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { return };
                let (s, name, hook) = (s.clone(), name.clone(), on_patch.clone());
                std::thread::spawn(move || serve(conn, &s, &name, &*hook));
            }
        });
        FakeApi { url, state }
    }

    pub fn label(&self, k: &str) -> Option<String> {
        let s = self.state.lock().unwrap();
        s.node["metadata"]["labels"][k].as_str().map(str::to_string)
    }

    pub fn annotation(&self, k: &str) -> Option<String> {
        let s = self.state.lock().unwrap();
        s.node["metadata"]["annotations"][k]
            .as_str()
            .map(str::to_string)
    }

    pub fn set_label(&self, k: &str, v: &str) {
        let mut s = self.state.lock().unwrap();
        s.node["metadata"]["labels"][k] = json!(v);
    }

    /// The values one label was PATCHed to, in order (`null`: removed).
    pub fn label_history(&self, k: &str) -> Vec<Value> {
        let s = self.state.lock().unwrap();
        s.patches
            .iter()
            .filter_map(|p| p["metadata"]["labels"].get(k).cloned())
            .collect()
    }

    pub fn events(&self) -> Vec<Value> {
        self.state.lock().unwrap().events.clone()
    }
}

fn answer(w: &mut TcpStream, code: u16, body: &Value) -> bool {
    let body = body.to_string();
    let head = format!(
        "HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    w.write_all(head.as_bytes()).is_ok() && w.write_all(body.as_bytes()).is_ok()
}

fn serve(conn: TcpStream, state: &Mutex<State>, node: &str, on_patch: &OnPatch) {
    let mut w = conn.try_clone().unwrap();
    let mut r = BufReader::new(conn);
    loop {
        let mut first = String::new();
        if r.read_line(&mut first).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = first.split(' ');
        let (method, target) = (
            parts.next().unwrap_or("").to_string(),
            parts.next().unwrap_or("").to_string(),
        );
        let (mut len, mut ctype) = (0usize, String::new());
        loop {
            let mut line = String::new();
            if r.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                break;
            }
            if let Some((k, v)) = line.split_once(':') {
                match k.trim().to_ascii_lowercase().as_str() {
                    "content-length" => len = v.trim().parse().unwrap_or(0),
                    "content-type" => ctype = v.trim().to_string(),
                    _ => {}
                }
            }
        }
        let mut body = vec![0; len];
        r.read_exact(&mut body).unwrap();
        let node_path = format!("/api/v1/nodes/{node}");
        let (code, out) = match (method.as_str(), target.as_str()) {
            ("GET", p) if p == node_path => (200, state.lock().unwrap().node.clone()),
            ("PATCH", p) if p == node_path => {
                assert_eq!(ctype, "application/merge-patch+json");
                let patch: Value = serde_json::from_slice(&body).unwrap();
                let after = {
                    let mut s = state.lock().unwrap();
                    merge(&mut s.node, &patch);
                    s.patches.push(patch);
                    s.node.clone()
                };
                on_patch(&after);
                (200, after)
            }
            ("POST", p) if p.starts_with("/api/v1/namespaces/") && p.ends_with("/events") => {
                let ev: Value = serde_json::from_slice(&body).unwrap();
                state.lock().unwrap().events.push(ev.clone());
                (201, ev)
            }
            _ => (
                404,
                json!({"kind": "Status", "status": "Failure", "reason": "NotFound", "code": 404}),
            ),
        };
        if !answer(&mut w, code, &out) {
            return;
        }
    }
}
