//! What `kubectl kustomize deploy/kubernetes/<dir>` renders, as YAML values, and the lookups the
//! per-component manifest tests (`deploy_device_plugin`, `deploy_mig_manager`) make on it.
#![allow(dead_code)] // each test uses the part it needs

use std::process::Command;

use serde::Deserialize;
use yaml_serde::Value;

/// `kubectl kustomize deploy/kubernetes/<dir>` as YAML documents (nulls dropped).
pub fn rendered(dir: &str) -> Vec<Value> {
    let path = gpuhook_e2e::workspace_root()
        .join("deploy/kubernetes")
        .join(dir);
    let out = Command::new("kubectl")
        .arg("kustomize")
        .arg(&path)
        .output()
        .expect("run kubectl");
    assert!(
        out.status.success(),
        "kustomize {dir}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("UTF-8 manifests");
    yaml_serde::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).expect("a YAML document"))
        .filter(|v| !v.is_null())
        .collect()
}

/// The object of `kind` named `name`.
pub fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

/// How many objects of `kind`.
pub fn count(docs: &[Value], kind: &str) -> usize {
    docs.iter().filter(|d| d["kind"] == kind).count()
}

/// A list of strings.
pub fn strs(v: &Value) -> Vec<String> {
    v.as_sequence()
        .expect("a list")
        .iter()
        .map(|s| s.as_str().expect("a string").to_string())
        .collect()
}
