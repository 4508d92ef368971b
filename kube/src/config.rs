//! How a [`Client`] is made: in a pod from the service account (HTTPS verified with its CA), or
//! against a plain-HTTP server on the loopback interface (tests only). Every agent follows no
//! redirect and uses no proxy: the client only ever talks to the one server it was built for.

use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

use crate::client::Client;
use crate::error::KubeError;
use crate::files::read_bounded;

/// Where a pod finds its service account's token and the cluster's CA.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// Whole-request timeout by default.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// The agent every client uses: no redirects (a 3xx comes back as an answer and becomes
/// [`KubeError::Redirect`]), no proxy, error statuses as answers (to read their `Status`), and
/// with `tls`, HTTPS only.
pub(crate) fn agent(tls: Option<ureq::tls::TlsConfig>, timeout: Duration) -> ureq::Agent {
    let cfg = ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .max_redirects(0)
        .proxy(None)
        .http_status_as_error(false)
        .https_only(tls.is_some());
    let cfg = match tls {
        Some(tls) => cfg.tls_config(tls),
        None => cfg,
    };
    ureq::Agent::new_with_config(cfg.build())
}

fn ca_config(ca_path: &Path) -> Result<ureq::tls::TlsConfig, KubeError> {
    use ureq::tls::{parse_pem, PemItem, RootCerts, TlsConfig};
    let pem = read_bounded(ca_path)?;
    let mut certs = Vec::new();
    for item in parse_pem(&pem) {
        match item {
            Ok(PemItem::Certificate(c)) => certs.push(c),
            Ok(_) => {}
            Err(source) => {
                return Err(KubeError::Ca {
                    path: ca_path.to_path_buf(),
                    source,
                })
            }
        }
    }
    if certs.is_empty() {
        return Err(KubeError::NoCa {
            path: ca_path.to_path_buf(),
        });
    }
    Ok(TlsConfig::builder()
        .root_certs(RootCerts::new_with_certs(&certs))
        .build())
}

impl Client {
    /// The API server as a pod sees it: `KUBERNETES_SERVICE_HOST`/`_PORT` and the service
    /// account in [`SERVICE_ACCOUNT_DIR`].
    pub fn in_cluster() -> Result<Self, KubeError> {
        let var = |var: &'static str| {
            std::env::var(var)
                .ok()
                .filter(|v| !v.is_empty())
                .ok_or(KubeError::NotInCluster { var })
        };
        let (host, port) = (
            var("KUBERNETES_SERVICE_HOST")?,
            var("KUBERNETES_SERVICE_PORT")?,
        );
        Self::with_service_account(&host, &port, Path::new(SERVICE_ACCOUNT_DIR))
    }

    /// `https://<host>:<port>` verified with `<sa_dir>/ca.crt` and authenticated with
    /// `<sa_dir>/token` (re-read on every request: projected tokens rotate).
    pub fn with_service_account(host: &str, port: &str, sa_dir: &Path) -> Result<Self, KubeError> {
        let url = format!("{host}:{port}");
        if host.is_empty()
            || host
                .bytes()
                .any(|b| b == b'/' || b == b'@' || b.is_ascii_whitespace())
            || port.parse::<u16>().is_err()
        {
            return Err(KubeError::Url {
                url,
                reason: "KUBERNETES_SERVICE_HOST must be a host name or address and KUBERNETES_SERVICE_PORT a port number",
            });
        }
        let tls = ca_config(&sa_dir.join("ca.crt"))?;
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host.to_string()
        };
        Ok(Client::new(
            format!("https://{host}:{port}"),
            Some(sa_dir.join("token")),
            agent(Some(tls), REQUEST_TIMEOUT),
        ))
    }

    /// A plain-HTTP server on the loopback interface without authentication (tests only):
    /// `http://127.0.0.1:<port>` (any of 127.0.0.0/8) or `http://[::1]:<port>`, a literal address
    /// (a name could resolve elsewhere). Any other scheme or host is refused: a real API server is
    /// reached over HTTPS only.
    pub fn loopback(url: &str) -> Result<Self, KubeError> {
        let refuse = |reason| KubeError::Url {
            url: url.to_string(),
            reason,
        };
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| refuse("only http://<loopback>:<port> is accepted here (a test server); a real API server is reached in-cluster over HTTPS"))?;
        let authority = rest.trim_end_matches('/');
        if authority.contains(['/', '@', '?', '#']) {
            return Err(refuse(
                "give only http://<loopback>:<port>, with no path, user or query",
            ));
        }
        let host = match authority.rsplit_once(':') {
            Some((h, p)) if p.parse::<u16>().is_ok() => h,
            _ => return Err(refuse("the URL needs a port: http://127.0.0.1:<port>")),
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if !host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback()) {
            return Err(refuse(
                "plain HTTP is only for a test server at a loopback address (127.0.0.0/8 or [::1])",
            ));
        }
        Ok(Client::new(
            format!("http://{authority}"),
            None,
            agent(None, REQUEST_TIMEOUT),
        ))
    }
}
