//! What a request is made of besides the client: the verb, a patch's content type, a list's
//! selectors, and the checks on names and paths that run before anything is sent.

use crate::error::KubeError;

/// An HTTP method the client sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Get,
    Post,
    Put,
    Patch,
    Delete,
}

impl Verb {
    /// The method's name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "GET",
            Verb::Post => "POST",
            Verb::Put => "PUT",
            Verb::Patch => "PATCH",
            Verb::Delete => "DELETE",
        }
    }
}

/// How a PATCH body is read by the API server (its `Content-Type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    /// RFC 7386 JSON merge patch: objects merge, lists are replaced whole.
    Merge,
    /// Kubernetes strategic merge patch (built-in kinds only): lists merge by their key.
    StrategicMerge,
    /// RFC 6902 JSON patch: a list of operations (`add`, `replace`, `test`, …).
    Json,
}

impl PatchType {
    /// The content type the API server expects for this kind of patch.
    pub fn content_type(self) -> &'static str {
        match self {
            PatchType::Merge => "application/merge-patch+json",
            PatchType::StrategicMerge => "application/strategic-merge-patch+json",
            PatchType::Json => "application/json-patch+json",
        }
    }
}

/// A list's filters and paging (`?labelSelector=…&fieldSelector=…&limit=…&continue=…`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListParams {
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
    pub limit: Option<u32>,
    pub continue_token: Option<String>,
}

impl ListParams {
    /// The query pairs, in a fixed order.
    pub fn pairs(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if let Some(s) = &self.label_selector {
            out.push(("labelSelector", s.clone()));
        }
        if let Some(s) = &self.field_selector {
            out.push(("fieldSelector", s.clone()));
        }
        if let Some(n) = self.limit {
            out.push(("limit", n.to_string()));
        }
        if let Some(s) = &self.continue_token {
            out.push(("continue", s.clone()));
        }
        out
    }
}

/// Refuses `value` unless it is a DNS subdomain (RFC 1123, as Kubernetes checks object names):
/// what a caller puts into a path is then one path segment, nothing more.
pub fn check_name(what: &'static str, value: &str) -> Result<(), KubeError> {
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    };
    if value.is_empty() || value.len() > 253 || !value.split('.').all(label_ok) {
        return Err(KubeError::Name {
            what,
            value: value.to_string(),
        });
    }
    Ok(())
}

/// Refuses a request path that could leave the one resource it names.
pub fn check_path(path: &str) -> Result<(), KubeError> {
    let bad = !path.starts_with('/')
        || path
            .bytes()
            .any(|b| b.is_ascii_control() || b == b'?' || b == b'#' || b == b' ')
        || path.split('/').any(|s| s == ".." || s == ".");
    if bad {
        return Err(KubeError::Path {
            path: path.to_string(),
        });
    }
    Ok(())
}

/// `key=value&…` with every byte outside RFC 3986's unreserved set percent-encoded.
pub fn encode_query(pairs: &[(&str, &str)]) -> String {
    let mut out = String::new();
    for (i, (k, v)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push('&');
        }
        encode_into(&mut out, k);
        out.push('=');
        encode_into(&mut out, v);
    }
    out
}

fn encode_into(out: &mut String, s: &str) {
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
}
