//! The hook's two inputs: the OCI state on stdin and `<bundle>/config.json`.
//!
//! Both are read with a size cap before parsing: the state comes from the runtime, but the config
//! is written from an image and a pod spec, and a hook that buffers an unbounded file on every
//! container start is a denial of service waiting to happen. Unknown fields are ignored (newer
//! runtimes add some).

use std::io::Read;
use std::path::{Path, PathBuf};

use gpuhook_inject::OciState;
use gpuhook_node::bounded::{read_bounded, read_bounded_from, BoundedReadError};
use serde_json::Value;

use super::error::PrestartError;

/// Largest OCI state accepted on stdin.
pub const MAX_STATE_BYTES: u64 = 1 << 20;
/// Largest `config.json` accepted.
pub const MAX_CONFIG_BYTES: u64 = gpuhook_node::bounded::MAX_OCI_CONFIG_BYTES;

/// Reads and parses the OCI state (from a hook's stdin).
pub fn read_state(reader: impl Read) -> Result<OciState, PrestartError> {
    let state_err = |reason: String| PrestartError::State { reason };
    let bytes = read_bounded_from(reader, MAX_STATE_BYTES)
        .map_err(|e| state_err(format!("read: {e}")))?
        .ok_or_else(|| state_err(format!("larger than {MAX_STATE_BYTES} bytes")))?;
    let state = OciState::from_slice(&bytes).map_err(|e| state_err(e.to_string()))?;
    if !state.bundle.is_absolute() {
        return Err(state_err(format!(
            "bundle {:?} is not an absolute path",
            gpuhook_node::bounded::preview(&state.bundle.to_string_lossy())
        )));
    }
    Ok(state)
}

/// `config.json` of a bundle, parsed once: the request and the bundle fields
/// ([`gpuhook_inject::BundleConfig::from_value`]) are both read from `value`.
#[derive(Debug)]
pub struct BundleJson {
    pub path: PathBuf,
    pub value: Value,
}

/// Reads `<bundle>/config.json` (at most [`MAX_CONFIG_BYTES`]).
pub fn read_bundle_config(bundle: &Path) -> Result<BundleJson, PrestartError> {
    let path = bundle.join("config.json");
    let err = |reason: String| PrestartError::BundleConfig {
        path: path.clone(),
        reason,
    };
    let bytes = read_bounded(&path, MAX_CONFIG_BYTES).map_err(|e| match e {
        BoundedReadError::TooLarge { .. } => err(format!(
            "larger than {} MiB; refusing to parse it",
            MAX_CONFIG_BYTES >> 20
        )),
        BoundedReadError::Io { error, .. } => err(error.to_string()),
    })?;
    let value: Value = serde_json::from_slice(&bytes).map_err(|e| err(e.to_string()))?;
    if !value.is_object() {
        return Err(err("is not a JSON object".into()));
    }
    Ok(BundleJson { path, value })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_is_capped_and_checked() {
        let ok =
            br#"{"ociVersion":"1.0.2","id":"c","status":"creating","pid":7,"bundle":"/b","x":{}}"#;
        let s = read_state(&ok[..]).unwrap();
        assert_eq!((s.id.as_str(), s.pid), ("c", Some(7)));
        let big = vec![b' '; usize::try_from(MAX_STATE_BYTES).unwrap() + 1];
        let err = read_state(&big[..]).unwrap_err().to_string();
        assert!(err.contains("larger than"), "{err}");
        let rel = br#"{"ociVersion":"1","id":"c","status":"creating","bundle":"b"}"#;
        assert!(read_state(&rel[..])
            .unwrap_err()
            .to_string()
            .contains("absolute"));
        let err = read_state(&b"{"[..]).unwrap_err().to_string();
        assert!(err.contains("invalid OCI state on stdin"), "{err}");
    }

    #[test]
    fn bundle_config_is_capped_and_must_be_an_object() {
        let dir = tempfile::tempdir().unwrap();
        let err = read_bundle_config(dir.path()).unwrap_err().to_string();
        assert!(err.contains("config.json"), "{err}");
        std::fs::write(dir.path().join("config.json"), "[1]").unwrap();
        assert!(read_bundle_config(dir.path())
            .unwrap_err()
            .to_string()
            .contains("not a JSON object"));
        let big = format!(
            "{{\"a\":\"{}\"}}",
            "x".repeat(usize::try_from(MAX_CONFIG_BYTES).unwrap())
        );
        std::fs::write(dir.path().join("config.json"), big).unwrap();
        assert!(read_bundle_config(dir.path())
            .unwrap_err()
            .to_string()
            .contains("larger than 4 MiB"));
        std::fs::write(dir.path().join("config.json"), r#"{"root":{"path":"r"}}"#).unwrap();
        let b = read_bundle_config(dir.path()).unwrap();
        assert_eq!(b.value["root"]["path"], "r");
    }
}
