//! `serve`'s flags for following the node's config label on the API server
//! ([`gpuhook_device_plugin::node_label`]).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use gpuhook_device_plugin::node_label::{LabelWatcher, DEFAULT_POLL};
use gpuhook_kube::Client;

use super::NodeArgs;

#[derive(Args, Debug)]
pub struct WatchArgs {
    /// This node's name: its `nvidia.com/device-plugin.config` label is read from the API server
    /// (in-cluster service account) and kept in --node-label-file (a private temp file if not
    /// given). Ignored with --config-name.
    #[arg(long, env = "NODE_NAME")]
    pub node_name: Option<String>,
    /// Plain-HTTP API server at a loopback address (`http://127.0.0.1:<port>`) instead of the
    /// in-cluster one (tests only; any other URL is refused).
    #[arg(long, requires = "node_name")]
    kube_api_url: Option<String>,
    /// How often the node's label is read, in milliseconds.
    #[arg(long, default_value_t = u64::try_from(DEFAULT_POLL.as_millis()).unwrap_or(10_000))]
    node_label_poll_ms: u64,
}

/// The running watcher and the private directory of its label file, if it made one.
pub struct Watching {
    _watcher: LabelWatcher,
    _dir: Option<tempfile::TempDir>,
}

impl WatchArgs {
    /// Starts following the label when a node name is given (and no fixed config name); points
    /// `node` at the label file the watcher keeps.
    pub fn start(&self, node: &mut NodeArgs) -> Result<Option<Watching>> {
        let Some(name) = &self.node_name else {
            return Ok(None);
        };
        if node.config_name.is_some() {
            tracing::info!(node = %name, "--config-name given: the node's label is not followed");
            return Ok(None);
        }
        let api = match &self.kube_api_url {
            Some(url) => Client::loopback(url)?,
            None => Client::in_cluster()
                .context("cannot reach the API server to follow the node's config label")?,
        };
        let mut dir = None;
        let path = match &node.node_label_file {
            Some(p) => p.clone(),
            None => {
                let d = tempfile::Builder::new()
                    .prefix("gpuhook-device-plugin-")
                    .tempdir()
                    .context("cannot create a private directory for the node-label file (give --node-label-file on a writable volume)")?;
                let p: PathBuf = d.path().join("node-label");
                dir = Some(d);
                p
            }
        };
        node.node_label_file = Some(path.clone());
        let every = Duration::from_millis(self.node_label_poll_ms.max(100));
        tracing::info!(node = %name, file = %path.display(), every = ?every, "following the node's config label");
        Ok(Some(Watching {
            _watcher: LabelWatcher::start(api, name.clone(), path, every),
            _dir: dir,
        }))
    }
}
