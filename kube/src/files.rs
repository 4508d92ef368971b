//! Small files the client reads (token, CA), read with a bound.

use std::io::Read;
use std::path::Path;

use crate::error::KubeError;

/// Largest token or CA file read.
pub const MAX_SECRET_FILE: u64 = 64 << 10;

/// The whole of `path`, refused when larger than [`MAX_SECRET_FILE`].
pub fn read_bounded(path: &Path) -> Result<Vec<u8>, KubeError> {
    let err = |source| KubeError::Read {
        path: path.to_path_buf(),
        source,
    };
    let mut out = Vec::new();
    std::fs::File::open(path)
        .map_err(err)?
        .take(MAX_SECRET_FILE + 1)
        .read_to_end(&mut out)
        .map_err(err)?;
    if u64::try_from(out.len()).unwrap_or(u64::MAX) > MAX_SECRET_FILE {
        return Err(KubeError::FileTooLarge {
            path: path.to_path_buf(),
            limit: MAX_SECRET_FILE,
        });
    }
    Ok(out)
}
