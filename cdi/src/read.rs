//! Reading a spec file with a size limit.
//!
//! Spec directories may hold files written by others; a huge (or endless, `/dev/zero` behind a
//! symlink) file must not make `gpuhook cdi list` or the runtime wrapper read without end. A
//! generated spec of a 64-MIG-device node is well under 1 MiB.

use std::io::Read;
use std::path::Path;

use crate::CdiError;

/// Largest spec file read (16 MiB).
pub const MAX_SPEC_BYTES: u64 = 16 << 20;

/// Reads `path`, failing when it holds more than `limit` bytes.
pub fn read_bounded(path: &Path, limit: u64) -> Result<Vec<u8>, CdiError> {
    let file = std::fs::File::open(path).map_err(|e| CdiError::io("read", path, e))?;
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| CdiError::io("read", path, e))?;
    if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > limit {
        return Err(CdiError::TooLarge {
            path: path.into(),
            limit,
        });
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_a_file_over_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.json");
        std::fs::write(&p, b"12345").unwrap();
        assert_eq!(read_bounded(&p, 5).unwrap(), b"12345");
        let err = read_bounded(&p, 4).unwrap_err().to_string();
        assert!(err.contains("larger than 4 bytes"), "{err}");
        let err = read_bounded(Path::new("/dev/zero"), 1024).unwrap_err();
        assert!(matches!(err, CdiError::TooLarge { .. }), "{err}");
    }
}
