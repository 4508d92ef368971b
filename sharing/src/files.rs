//! Reading config files an admin wrote (a ConfigMap mount): bounded, never blocking on a FIFO,
//! symlinks followed (a ConfigMap volume's files are symlinks into `..data/`).

use std::fs::OpenOptions;
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::error::ConfigError;

/// Reads at most `max` bytes of the regular file `path` as UTF-8 text.
pub fn read_text(path: &Path, max: u64) -> Result<String, ConfigError> {
    let read_err = |error| ConfigError::Read {
        path: path.to_path_buf(),
        error,
    };
    let bytes = read_regular(path, max).map_err(read_err)?;
    String::from_utf8(bytes).map_err(|e| {
        read_err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("not UTF-8 text ({e})"),
        ))
    })
}

fn read_regular(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    if !f.metadata()?.file_type().is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file (a config is a plain file, or a link to one)",
        ));
    }
    let mut out = Vec::new();
    f.take(max.saturating_add(1)).read_to_end(&mut out)?;
    if u64::try_from(out.len()).unwrap_or(u64::MAX) > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("the file is larger than {max} bytes; refusing to read it"),
        ));
    }
    Ok(out)
}
