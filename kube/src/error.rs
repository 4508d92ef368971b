//! Why a request to the API server failed. Each variant names the method and path; an answer
//! with an error status carries the code and the API server's `Status.message`, so a caller can
//! tell "not found" (create it) from "conflict" (read it again and retry) and a log says why.

use std::path::PathBuf;

/// Why the client could not be built or a request failed.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    #[error("not in a cluster: {var} is not set (run as a pod with a service account, or give a test server)")]
    NotInCluster { var: &'static str },
    #[error("cannot read {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} is larger than {limit} bytes", path.display())]
    FileTooLarge { path: PathBuf, limit: u64 },
    #[error("no certificate in the cluster CA file {}", path.display())]
    NoCa { path: PathBuf },
    #[error("invalid cluster CA file {}", path.display())]
    Ca {
        path: PathBuf,
        #[source]
        source: ureq::Error,
    },
    #[error("API server URL {url:?} refused: {reason}")]
    Url { url: String, reason: &'static str },
    #[error("{what} {value:?} is not a valid Kubernetes name (lowercase DNS subdomain, at most 253 characters)")]
    Name { what: &'static str, value: String },
    #[error("request path {path:?} refused: it must start with '/' and hold no '?', '#', '..' segment or control character")]
    Path { path: String },
    #[error("{method} {path} failed")]
    Transport {
        method: String,
        path: String,
        #[source]
        source: ureq::Error,
    },
    #[error("{method} {path}: the API server answered {code} redirecting to {location:?}; redirects are never followed")]
    Redirect {
        method: String,
        path: String,
        code: u16,
        location: String,
    },
    #[error("{method} {path}: HTTP {code}{}: {message}", reason_part(reason))]
    Status {
        method: String,
        path: String,
        code: u16,
        /// `Status.reason` (`NotFound`, `AlreadyExists`, `Conflict`, …), or empty.
        reason: String,
        /// `Status.message`, or the start of a body that is not a `Status`.
        message: String,
    },
    #[error("{method} {path}: the answer is larger than {limit} bytes")]
    TooLarge {
        method: String,
        path: String,
        limit: u64,
    },
    #[error("{method} {path}: the answer is not the expected JSON")]
    Json {
        method: String,
        path: String,
        #[source]
        source: serde_json::Error,
    },
}

fn reason_part(reason: &str) -> String {
    if reason.is_empty() {
        String::new()
    } else {
        format!(" {reason}")
    }
}

impl KubeError {
    /// The HTTP status of an error answer (`None`: no answer, or not an error status).
    pub fn code(&self) -> Option<u16> {
        match self {
            KubeError::Status { code, .. } | KubeError::Redirect { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// 404: the object (or its namespace) does not exist.
    pub fn is_not_found(&self) -> bool {
        self.code() == Some(404)
    }

    /// 409: it exists already (POST) or changed since it was read (PUT with a stale
    /// `resourceVersion`).
    pub fn is_conflict(&self) -> bool {
        self.code() == Some(409)
    }
}
