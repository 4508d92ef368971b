//! Reading node files with a size limit.
//!
//! Discovery reads files of a driver root that may be a container image or a driver container
//! (`/run/nvidia/driver`); a huge or endless file (a `/dev/zero` behind a symlink) must not make
//! `gpuhook cdi generate` or the prestart hook read without end.

use std::io::Read;
use std::path::Path;

use crate::error::NodeError;

/// Largest `ld.so.cache` read (real ones are well under 4 MiB).
pub const MAX_LD_CACHE_BYTES: u64 = 64 << 20;
/// Largest inventory cache read.
pub const MAX_INVENTORY_BYTES: u64 = 16 << 20;
/// Largest `/proc/driver` file read.
pub const MAX_PROC_BYTES: u64 = 1 << 20;

/// Reads `path`, failing with [`NodeError::TooLarge`] past `limit` bytes.
pub fn read_bounded(path: &Path, limit: u64) -> Result<Vec<u8>, NodeError> {
    let file = std::fs::File::open(path).map_err(|e| NodeError::io(path, e))?;
    let mut data = Vec::new();
    file.take(limit.saturating_add(1))
        .read_to_end(&mut data)
        .map_err(|e| NodeError::io(path, e))?;
    if u64::try_from(data.len()).unwrap_or(u64::MAX) > limit {
        return Err(NodeError::TooLarge {
            path: path.to_path_buf(),
            limit,
        });
    }
    Ok(data)
}

/// [`read_bounded`] as UTF-8 text.
pub fn read_text_bounded(path: &Path, limit: u64) -> Result<String, NodeError> {
    let data = read_bounded(path, limit)?;
    String::from_utf8(data).map_err(|e| {
        NodeError::io(
            path,
            std::io::Error::new(std::io::ErrorKind::InvalidData, e.utf8_error()),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stops_at_the_limit() {
        let err = read_bounded(Path::new("/dev/zero"), 4096).unwrap_err();
        assert!(
            matches!(err, NodeError::TooLarge { limit: 4096, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("/dev/zero"), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, "abc").unwrap();
        assert_eq!(read_text_bounded(&p, 3).unwrap(), "abc");
    }
}
