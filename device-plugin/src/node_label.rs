//! The node's `nvidia.com/device-plugin.config` label, read from the API server, so that
//! relabelling a node switches its named config without a pod restart (NVIDIA's
//! config-manager sidecar does the same with a watch; we poll, which needs only `get` on nodes).
//!
//! The watcher polls `GET /api/v1/nodes/<name>` and keeps the label value in the node-label file
//! the plugin already follows (`--node-label-file`, see [`crate::source::ConfigName::File`]): the
//! serving loop notices the file change and reloads, so the label takes the same path as a
//! file written by any other agent. A failed poll keeps the last value (the last good config
//! stays served) and is logged.
//!
//! In a pod the API server is `https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT`,
//! verified with the service account's `ca.crt` and authenticated with its `token` (re-read on
//! every request: projected tokens rotate). HTTP client: `ureq` 3.0 with rustls (ring): a small
//! blocking client with no async runtime of its own, which suits one request every few seconds
//! on its own thread; tonic in this crate is built without TLS, so no TLS stack was in the tree.
//! `ureq` is held at 3.0.x: later 3.x need Rust 1.85, the workspace's floor is 1.82.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

/// The label that names the node's config (NVIDIA's `nvidia.com/device-plugin.config`).
pub const CONFIG_LABEL: &str = "nvidia.com/device-plugin.config";
/// Where a pod finds its service account's token and the cluster's CA.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// How often the node is read by default.
pub const DEFAULT_POLL: Duration = Duration::from_secs(10);
/// Largest Node object read (a node with many labels and images is well under 1 MiB).
const MAX_NODE_OBJECT: u64 = 4 << 20;
/// Largest token or CA file read.
const MAX_SECRET_FILE: u64 = 64 << 10;
/// Whole-request timeout.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Why the node's label could not be read or kept.
#[derive(Debug, thiserror::Error)]
pub enum NodeLabelError {
    #[error("not in a cluster: {var} is not set (run the plugin as a pod, give --kube-api-url, or leave out --node-name/NODE_NAME)")]
    NotInCluster { var: &'static str },
    #[error("cannot read {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("no certificate in the cluster CA file {}", path.display())]
    NoCa { path: PathBuf },
    #[error("invalid cluster CA file {}", path.display())]
    Ca {
        path: PathBuf,
        #[source]
        source: ureq::Error,
    },
    #[error("--kube-api-url {url:?}: only an http:// URL is accepted (a test override); in a cluster leave it out")]
    Url { url: String },
    #[error("node name {name:?} is not a DNS subdomain (check --node-name / NODE_NAME)")]
    NodeName { name: String },
    #[error("GET {url} failed")]
    Get {
        url: String,
        #[source]
        source: ureq::Error,
    },
    #[error("the Node object from {url} is not valid JSON")]
    Json {
        url: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("cannot write the node-label file {}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// A client of the API server's `nodes` resource.
#[derive(Debug, Clone)]
pub struct KubeApi {
    base: String,
    token: Option<PathBuf>,
    agent: ureq::Agent,
}

fn read_bounded(path: &Path) -> Result<Vec<u8>, NodeLabelError> {
    let err = |source| NodeLabelError::Read {
        path: path.to_path_buf(),
        source,
    };
    let mut out = Vec::new();
    std::fs::File::open(path)
        .map_err(err)?
        .take(MAX_SECRET_FILE)
        .read_to_end(&mut out)
        .map_err(err)?;
    Ok(out)
}

fn agent(tls: Option<ureq::tls::TlsConfig>) -> ureq::Agent {
    let mut cfg = ureq::Agent::config_builder().timeout_global(Some(REQUEST_TIMEOUT));
    if let Some(tls) = tls {
        cfg = cfg.tls_config(tls);
    }
    ureq::Agent::new_with_config(cfg.build())
}

impl KubeApi {
    /// The API server as a pod sees it (env and the service account dir).
    pub fn in_cluster() -> Result<Self, NodeLabelError> {
        let var = |var: &'static str| {
            std::env::var(var)
                .ok()
                .filter(|v| !v.is_empty())
                .ok_or(NodeLabelError::NotInCluster { var })
        };
        let (host, port) = (
            var("KUBERNETES_SERVICE_HOST")?,
            var("KUBERNETES_SERVICE_PORT")?,
        );
        Self::with_service_account(&host, &port, Path::new(SERVICE_ACCOUNT_DIR))
    }

    /// `https://<host>:<port>` verified with `<sa_dir>/ca.crt`, authenticated with `<sa_dir>/token`.
    pub fn with_service_account(
        host: &str,
        port: &str,
        sa_dir: &Path,
    ) -> Result<Self, NodeLabelError> {
        use ureq::tls::{parse_pem, PemItem, RootCerts, TlsConfig};
        let ca_path = sa_dir.join("ca.crt");
        let pem = read_bounded(&ca_path)?;
        let mut certs = Vec::new();
        for item in parse_pem(&pem) {
            match item {
                Ok(PemItem::Certificate(c)) => certs.push(c),
                Ok(_) => {}
                Err(source) => {
                    return Err(NodeLabelError::Ca {
                        path: ca_path,
                        source,
                    })
                }
            }
        }
        if certs.is_empty() {
            return Err(NodeLabelError::NoCa { path: ca_path });
        }
        let tls = TlsConfig::builder()
            .root_certs(RootCerts::new_with_certs(&certs))
            .build();
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host.to_string()
        };
        Ok(KubeApi {
            base: format!("https://{host}:{port}"),
            token: Some(sa_dir.join("token")),
            agent: agent(Some(tls)),
        })
    }

    /// A plain-HTTP API server without authentication (tests only).
    pub fn plain(url: &str) -> Result<Self, NodeLabelError> {
        if !url.starts_with("http://") {
            return Err(NodeLabelError::Url {
                url: url.to_string(),
            });
        }
        Ok(KubeApi {
            base: url.trim_end_matches('/').to_string(),
            token: None,
            agent: agent(None),
        })
    }

    /// Authenticates with the bearer token in `path` (re-read on every request).
    #[must_use]
    pub fn with_token(mut self, path: PathBuf) -> Self {
        self.token = Some(path);
        self
    }

    /// The node's [`CONFIG_LABEL`] value now (`None`: no label).
    pub fn config_label(&self, node: &str) -> Result<Option<String>, NodeLabelError> {
        let valid = !node.is_empty()
            && node.len() <= 253
            && node
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
        if !valid {
            return Err(NodeLabelError::NodeName {
                name: node.to_string(),
            });
        }
        let url = format!("{}/api/v1/nodes/{node}", self.base);
        let get = |source| NodeLabelError::Get {
            url: url.clone(),
            source,
        };
        let mut req = self.agent.get(&url).header("Accept", "application/json");
        if let Some(path) = &self.token {
            let token = String::from_utf8_lossy(&read_bounded(path)?)
                .trim()
                .to_string();
            req = req.header("Authorization", format!("Bearer {token}"));
        }
        let body = req
            .call()
            .map_err(get)?
            .into_body()
            .into_with_config()
            .limit(MAX_NODE_OBJECT)
            .read_to_vec()
            .map_err(get)?;
        let node: serde_json::Value =
            serde_json::from_slice(&body).map_err(|source| NodeLabelError::Json {
                url: url.clone(),
                source,
            })?;
        Ok(node["metadata"]["labels"][CONFIG_LABEL]
            .as_str()
            .map(str::to_string))
    }
}

/// Writes `value` (empty: no label) to `path` through a temp file and a rename, unless the file
/// already says it; returns whether it wrote.
pub fn store(path: &Path, value: Option<&str>) -> Result<bool, NodeLabelError> {
    let want = value.unwrap_or("");
    if std::fs::read_to_string(path).is_ok_and(|s| s.trim() == want) {
        return Ok(false);
    }
    let err = |source| NodeLabelError::Write {
        path: path.to_path_buf(),
        source,
    };
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, want).map_err(err)?;
    std::fs::rename(&tmp, path).map_err(err)?;
    Ok(true)
}

/// Reads the label once and stores it; a failure is logged and the file left as it was.
pub fn sync_once(api: &KubeApi, node: &str, path: &Path) {
    let res = api
        .config_label(node)
        .and_then(|v| store(path, v.as_deref()).map(|w| (v, w)));
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
    pub fn start(api: KubeApi, node: String, path: PathBuf, every: Duration) -> Self {
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
