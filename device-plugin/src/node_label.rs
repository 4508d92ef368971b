//! The node's `nvidia.com/device-plugin.config` label, read from the API server, so that
//! relabelling a node switches its named config without a pod restart (NVIDIA's
//! config-manager sidecar does the same with a watch; we poll, which needs only `get` on nodes).
//!
//! The watcher polls `GET /api/v1/nodes/<name>` through the workspace's Kubernetes client
//! ([`gpuhook_kube::Client`]: HTTPS verified with the service account's CA, no redirects) and
//! keeps the label value in the node-label file the plugin already follows (`--node-label-file`,
//! see [`crate::source::ConfigName::File`]): the serving loop notices the file change and
//! reloads, so the label takes the same path as a file written by any other agent. A failed poll
//! keeps the last value (the last good config stays served) and is logged.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use gpuhook_kube::{check_name, Client, KubeError};

/// The label that names the node's config (NVIDIA's `nvidia.com/device-plugin.config`).
pub const CONFIG_LABEL: &str = "nvidia.com/device-plugin.config";
/// How often the node is read by default.
pub const DEFAULT_POLL: Duration = Duration::from_secs(10);
/// Largest Node object read (a node with many labels and images is well under 1 MiB).
const MAX_NODE_OBJECT: u64 = 4 << 20;

/// Why the node's label could not be read or kept.
#[derive(Debug, thiserror::Error)]
pub enum NodeLabelError {
    #[error(transparent)]
    Kube(#[from] KubeError),
    #[error("cannot write the node-label file")]
    Write(#[source] gpuhook_fs::WriteError),
}

/// The node's [`CONFIG_LABEL`] value now (`None`: no label).
pub fn config_label(api: &Client, node: &str) -> Result<Option<String>, NodeLabelError> {
    check_name("node name (--node-name / NODE_NAME)", node)?;
    #[derive(serde::Deserialize)]
    struct Meta {
        #[serde(default)]
        labels: std::collections::BTreeMap<String, String>,
    }
    #[derive(serde::Deserialize)]
    struct Node {
        metadata: Meta,
    }
    let api = api.clone().with_max_response(MAX_NODE_OBJECT);
    let node: Node = api.get_as(&format!("/api/v1/nodes/{node}"))?;
    Ok(node.metadata.labels.get(CONFIG_LABEL).cloned())
}

/// Writes `value` (empty: no label) to `path` with the workspace's atomic writer, unless the file
/// already says it; returns whether it wrote.
pub fn store(path: &Path, value: Option<&str>) -> Result<bool, NodeLabelError> {
    let outcome = gpuhook_fs::AtomicWriter::new(0o644)
        .durable(false)
        .skip_unchanged()
        .write(path, value.unwrap_or("").as_bytes())
        .map_err(NodeLabelError::Write)?;
    Ok(outcome == gpuhook_fs::Outcome::Written)
}

/// Reads the label once and stores it; a failure is logged and the file left as it was.
pub fn sync_once(api: &Client, node: &str, path: &Path) {
    let res = config_label(api, node).and_then(|v| store(path, v.as_deref()).map(|w| (v, w)));
    match res {
        Ok((value, true)) => {
            tracing::info!(node, label = CONFIG_LABEL, value = ?value, "node config label changed");
        }
        Ok((_, false)) => {}
        Err(e) => {
            tracing::warn!(node, error = %crate::error::chain(&e), "cannot read the node's config label; keeping the last value");
        }
    }
}

/// The polling thread; stops when dropped.
#[derive(Debug)]
pub struct LabelWatcher {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl LabelWatcher {
    /// Reads the label now (before the first config load), then every `every` on a thread.
    pub fn start(api: Client, node: String, path: PathBuf, every: Duration) -> Self {
        sync_once(&api, &node, &path);
        let (stop, rx) = mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            while let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(every) {
                sync_once(&api, &node, &path);
            }
        });
        LabelWatcher {
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

impl Drop for LabelWatcher {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
