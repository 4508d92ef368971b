//! Errors of the device plugin library.

use std::path::PathBuf;

/// Why serving or registering failed.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    #[error("cannot prepare socket {}", path.display())]
    Socket {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot connect to {}", path.display())]
    Connect {
        path: PathBuf,
        #[source]
        source: tonic::transport::Error,
    },
    #[error("no answer from {} within {secs} s", path.display())]
    Timeout { path: PathBuf, secs: u64 },
    #[error("the kubelet refused to register {resource}: {}", status.message())]
    Refused {
        resource: String,
        status: Box<tonic::Status>,
    },
    #[error("resource name {resource:?} has no prefix (`vendor/name`), so it has no socket name")]
    ResourceName { resource: String },
    #[error("cannot compute what this node advertises (config set and GPUs)")]
    Config {
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// `e` and its causes, `: `-joined, for logs (each cause once: no Display above repeats its
/// source).
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cur = c.source();
    }
    out
}
