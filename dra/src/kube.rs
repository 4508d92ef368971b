//! The API-server calls the plugin makes, behind one small trait ([`Cluster`]) so the driver and
//! its tests do not depend on how the API server is reached. [`HttpCluster`] is the client used
//! in a pod (service-account token and CA) and by the tests' fake API server (plain http).
//!
//! Paths (resource.k8s.io/v1, dra-facts §3):
//! - `GET /apis/resource.k8s.io/v1/namespaces/<ns>/resourceclaims/<name>`
//! - `GET /apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName=<node>,spec.driver=<driver>`
//! - `POST /apis/resource.k8s.io/v1/resourceslices`, `PUT …/resourceslices/<name>`,
//!   `DELETE …/resourceslices/<name>`

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

/// Root of the resource.k8s.io/v1 API.
pub const RESOURCE_V1: &str = "/apis/resource.k8s.io/v1";
/// Largest object read from the API server (a claim or a list of this node's slices).
const MAX_OBJECT: u64 = 8 << 20;
/// Largest token or CA file read.
const MAX_SECRET_FILE: u64 = 64 << 10;
/// Whole-request timeout.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Where a pod finds its service account's token and the cluster's CA.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// A failed API-server call.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    #[error("{method} {path}: HTTP {status}: {message}")]
    Status {
        method: &'static str,
        path: String,
        status: u16,
        message: String,
    },
    #[error("{method} {path}: {message}")]
    Transport {
        method: &'static str,
        path: String,
        message: String,
    },
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("not in a cluster: {0} is not set (run as a pod or give --kube-api-url)")]
    NotInCluster(&'static str),
    #[error("--kube-api-url {0:?}: only http:// is accepted (a test override)")]
    Url(String),
    #[error("cluster CA {}: {message}", path.display())]
    Ca { path: PathBuf, message: String },
}

impl KubeError {
    /// The HTTP status of an answered call.
    pub fn status(&self) -> Option<u16> {
        match self {
            KubeError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// What the plugin asks of the API server.
pub trait Cluster: Send + Sync + std::fmt::Debug {
    /// The ResourceClaim `namespace/name` as JSON.
    fn get_claim(&self, namespace: &str, name: &str) -> Result<Value, KubeError>;
    /// This node's ResourceSlices of `driver`.
    fn list_slices(&self, node: &str, driver: &str) -> Result<Vec<Value>, KubeError>;
    fn create_slice(&self, slice: &Value) -> Result<(), KubeError>;
    fn replace_slice(&self, name: &str, slice: &Value) -> Result<(), KubeError>;
    fn delete_slice(&self, name: &str) -> Result<(), KubeError>;
}

/// The API server over HTTP(S) (ureq, as the device plugin's node-label reader).
#[derive(Debug, Clone)]
pub struct HttpCluster {
    base: String,
    token: Option<PathBuf>,
    agent: ureq::Agent,
}

fn read_bounded(path: &Path, limit: u64) -> Result<Vec<u8>, KubeError> {
    let err = |source| KubeError::Read {
        path: path.to_path_buf(),
        source,
    };
    let mut out = Vec::new();
    std::fs::File::open(path)
        .map_err(err)?
        .take(limit)
        .read_to_end(&mut out)
        .map_err(err)?;
    Ok(out)
}

fn agent(tls: Option<ureq::tls::TlsConfig>) -> ureq::Agent {
    let mut cfg = ureq::Agent::config_builder()
        .timeout_global(Some(REQUEST_TIMEOUT))
        .http_status_as_error(false);
    if let Some(tls) = tls {
        cfg = cfg.tls_config(tls);
    }
    ureq::Agent::new_with_config(cfg.build())
}

impl HttpCluster {
    /// A plain-HTTP API server without authentication (tests only).
    pub fn plain(url: &str) -> Result<Self, KubeError> {
        if !url.starts_with("http://") {
            return Err(KubeError::Url(url.to_string()));
        }
        Ok(HttpCluster {
            base: url.trim_end_matches('/').to_string(),
            token: None,
            agent: agent(None),
        })
    }

    /// The API server as a pod sees it (`KUBERNETES_SERVICE_HOST`/`_PORT`, the service account).
    pub fn in_cluster() -> Result<Self, KubeError> {
        use ureq::tls::{parse_pem, PemItem, RootCerts, TlsConfig};
        let var = |v: &'static str| {
            std::env::var(v)
                .ok()
                .filter(|s| !s.is_empty())
                .ok_or(KubeError::NotInCluster(v))
        };
        let (host, port) = (
            var("KUBERNETES_SERVICE_HOST")?,
            var("KUBERNETES_SERVICE_PORT")?,
        );
        let sa = Path::new(SERVICE_ACCOUNT_DIR);
        let ca_path = sa.join("ca.crt");
        let pem = read_bounded(&ca_path, MAX_SECRET_FILE)?;
        let mut certs = Vec::new();
        for item in parse_pem(&pem) {
            match item {
                Ok(PemItem::Certificate(c)) => certs.push(c),
                Ok(_) => {}
                Err(e) => {
                    return Err(KubeError::Ca {
                        path: ca_path,
                        message: e.to_string(),
                    })
                }
            }
        }
        if certs.is_empty() {
            return Err(KubeError::Ca {
                path: ca_path,
                message: "no certificate in it".into(),
            });
        }
        let tls = TlsConfig::builder()
            .root_certs(RootCerts::new_with_certs(&certs))
            .build();
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host
        };
        Ok(HttpCluster {
            base: format!("https://{host}:{port}"),
            token: Some(sa.join("token")),
            agent: agent(Some(tls)),
        })
    }

    fn call(
        &self,
        method: &'static str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, KubeError> {
        let url = format!("{}{path}", self.base);
        let transport = |message: String| KubeError::Transport {
            method,
            path: path.to_string(),
            message,
        };
        let mut req = ureq::http::Request::builder()
            .method(method)
            .uri(&url)
            .header("Accept", "application/json");
        if let Some(t) = &self.token {
            let token = read_bounded(t, MAX_SECRET_FILE)?;
            let token = String::from_utf8_lossy(&token).trim().to_string();
            req = req.header("Authorization", format!("Bearer {token}"));
        }
        let resp = match body {
            Some(b) => {
                let bytes = serde_json::to_vec(b).map_err(|e| transport(e.to_string()))?;
                let req = req
                    .header("Content-Type", "application/json")
                    .body(bytes)
                    .map_err(|e| transport(e.to_string()))?;
                self.agent.run(req)
            }
            None => {
                let req = req.body(()).map_err(|e| transport(e.to_string()))?;
                self.agent.run(req)
            }
        }
        .map_err(|e| transport(e.to_string()))?;
        let status = resp.status().as_u16();
        let mut text = String::new();
        resp.into_body()
            .into_reader()
            .take(MAX_OBJECT)
            .read_to_string(&mut text)
            .map_err(|e| transport(e.to_string()))?;
        if !(200..300).contains(&status) {
            let message = serde_json::from_str::<Value>(&text)
                .ok()
                .and_then(|v| v.get("message").and_then(Value::as_str).map(String::from))
                .unwrap_or_else(|| text.chars().take(500).collect());
            return Err(KubeError::Status {
                method,
                path: path.to_string(),
                status,
                message,
            });
        }
        if text.trim().is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_str(&text).map_err(|e| transport(format!("invalid JSON: {e}")))
    }
}

impl Cluster for HttpCluster {
    fn get_claim(&self, namespace: &str, name: &str) -> Result<Value, KubeError> {
        self.call(
            "GET",
            &format!("{RESOURCE_V1}/namespaces/{namespace}/resourceclaims/{name}"),
            None,
        )
    }

    fn list_slices(&self, node: &str, driver: &str) -> Result<Vec<Value>, KubeError> {
        let list = self.call(
            "GET",
            &format!(
                "{RESOURCE_V1}/resourceslices?fieldSelector=spec.nodeName%3D{node}%2Cspec.driver%3D{driver}"
            ),
            None,
        )?;
        Ok(list
            .get("items")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default())
    }

    fn create_slice(&self, slice: &Value) -> Result<(), KubeError> {
        self.call(
            "POST",
            &format!("{RESOURCE_V1}/resourceslices"),
            Some(slice),
        )
        .map(drop)
    }

    fn replace_slice(&self, name: &str, slice: &Value) -> Result<(), KubeError> {
        self.call(
            "PUT",
            &format!("{RESOURCE_V1}/resourceslices/{name}"),
            Some(slice),
        )
        .map(drop)
    }

    fn delete_slice(&self, name: &str) -> Result<(), KubeError> {
        match self.call(
            "DELETE",
            &format!("{RESOURCE_V1}/resourceslices/{name}"),
            None,
        ) {
            Err(e) if e.status() == Some(404) => Ok(()),
            r => r.map(drop),
        }
    }
}
