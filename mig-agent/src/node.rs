//! The manager's view of the API server: its own Node's labels and annotations (GET), changes to
//! them (one JSON merge PATCH, as NVIDIA's manager writes labels since v0.13.1) and Events about
//! the Node. [`KubeNode`] is the real one, over gpuhook-kube; tests use fakes.

use std::time::{SystemTime, UNIX_EPOCH};

use gpuhook_kube::{check_name, Client, KubeError, PatchType};
use serde_json::{json, Map, Value};

use crate::labels::{Changes, Labels};

/// Why talking to the API server failed.
#[derive(Debug, thiserror::Error)]
pub enum NodeApiError {
    #[error(transparent)]
    Kube(#[from] KubeError),
    #[error("Node {node}: {what}")]
    Shape { node: String, what: String },
}

/// The Node's metadata the manager reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeMeta {
    pub labels: Labels,
    pub annotations: Labels,
}

/// What the manager needs of the API server.
pub trait NodeApi {
    /// The Node's labels and annotations now.
    fn read(&self) -> Result<NodeMeta, NodeApiError>;
    /// One merge PATCH of labels and annotations (`None` removes a key).
    fn patch(&self, labels: &Changes, annotations: &Changes) -> Result<(), NodeApiError>;
    /// An Event about the Node (`warning`: type Warning, else Normal).
    fn event(&self, warning: bool, reason: &str, message: &str) -> Result<(), NodeApiError>;
}

/// [`NodeApi`] over gpuhook-kube.
#[derive(Debug, Clone)]
pub struct KubeNode {
    client: Client,
    node: String,
    /// Where Events go (`None`: no Events).
    events_namespace: Option<String>,
}

impl KubeNode {
    /// `node` and `events_namespace` are checked as Kubernetes names before they go into a path.
    pub fn new(
        client: Client,
        node: &str,
        events_namespace: Option<&str>,
    ) -> Result<KubeNode, NodeApiError> {
        check_name("node name", node)?;
        if let Some(ns) = events_namespace {
            check_name("events namespace", ns)?;
        }
        Ok(KubeNode {
            client,
            node: node.to_string(),
            events_namespace: events_namespace.map(str::to_string),
        })
    }

    fn path(&self) -> String {
        format!("/api/v1/nodes/{}", self.node)
    }
}

fn string_map(node: &str, v: &Value, what: &str) -> Result<Labels, NodeApiError> {
    let mut out = Labels::new();
    let Some(obj) = v.as_object() else {
        return if v.is_null() {
            Ok(out)
        } else {
            Err(NodeApiError::Shape {
                node: node.to_string(),
                what: format!("metadata.{what} is not an object"),
            })
        };
    };
    for (k, v) in obj {
        if let Some(s) = v.as_str() {
            out.insert(k.clone(), s.to_string());
        }
    }
    Ok(out)
}

/// A merge-patch object from changes: `None` becomes `null` (remove).
pub fn merge_object(changes: &Changes) -> Value {
    let map: Map<String, Value> = changes
        .iter()
        .map(|(k, v)| (k.clone(), v.clone().map_or(Value::Null, Value::String)))
        .collect();
    Value::Object(map)
}

impl NodeApi for KubeNode {
    fn read(&self) -> Result<NodeMeta, NodeApiError> {
        let v = self.client.get(&self.path())?;
        let meta = &v["metadata"];
        Ok(NodeMeta {
            labels: string_map(&self.node, &meta["labels"], "labels")?,
            annotations: string_map(&self.node, &meta["annotations"], "annotations")?,
        })
    }

    fn patch(&self, labels: &Changes, annotations: &Changes) -> Result<(), NodeApiError> {
        let mut metadata = Map::new();
        if !labels.is_empty() {
            metadata.insert("labels".into(), merge_object(labels));
        }
        if !annotations.is_empty() {
            metadata.insert("annotations".into(), merge_object(annotations));
        }
        if metadata.is_empty() {
            return Ok(());
        }
        let body = json!({ "metadata": metadata });
        self.client.patch(&self.path(), PatchType::Merge, &body)?;
        Ok(())
    }

    fn event(&self, warning: bool, reason: &str, message: &str) -> Result<(), NodeApiError> {
        let Some(ns) = &self.events_namespace else {
            return Ok(());
        };
        let now = rfc3339(SystemTime::now());
        let body = json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": { "generateName": format!("{}.mig-manager.", self.node) },
            "involvedObject": { "apiVersion": "v1", "kind": "Node", "name": self.node, "uid": self.node },
            "reason": reason,
            "message": message,
            "type": if warning { "Warning" } else { "Normal" },
            "source": { "component": "gpuhook-mig-manager", "host": self.node },
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        });
        self.client
            .create(&format!("/api/v1/namespaces/{ns}/events"), &body)?;
        Ok(())
    }
}

/// `2026-11-28T10:00:00Z` (UTC, seconds), for Event timestamps.
pub fn rfc3339(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm), in unsigned steps.
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}
