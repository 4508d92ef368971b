//! gpuhook's one Kubernetes API client: what the device plugin (the node's config label) and
//! every other gpuhook agent that talks to the API server use.
//!
//! - **Config**: in a pod, `https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT` verified
//!   with the service account's `ca.crt`, authenticated with its `token`, re-read on every request
//!   (projected tokens rotate) ([`Client::in_cluster`]). Plain HTTP only through
//!   [`Client::loopback`], for test servers at a loopback address.
//! - **One server, HTTPS only**: no redirect is ever followed (a 3xx is
//!   [`KubeError::Redirect`] naming its `Location`), no proxy is used, and a TLS client refuses
//!   any `http://` URL. What the API server says (a node's label, a config) cannot come from
//!   another host or over plaintext.
//! - **Bounded**: a whole-request timeout, answers read up to a limit
//!   ([`Client::with_max_response`]), token and CA files read up to 64 KiB.
//! - **Verbs**: JSON GET (object, list with selectors), POST, PUT, PATCH (merge, strategic-merge,
//!   JSON patch), DELETE. Errors carry the status code, the API server's `Status.message` and the
//!   path; [`KubeError::is_not_found`] / [`KubeError::is_conflict`] drive create-or-update.
//!
//! HTTP: `ureq` 3.0 with rustls (ring), a small blocking client with no async runtime of its own
//! (see `docs/dependencies.md`); callers in async code run it on a blocking thread.

mod client;
mod config;
mod error;
mod files;
mod params;

pub use client::{Client, DEFAULT_MAX_RESPONSE};
pub use config::{REQUEST_TIMEOUT, SERVICE_ACCOUNT_DIR};
pub use error::KubeError;
pub use params::{check_name, check_path, encode_query, ListParams, PatchType, Verb};
