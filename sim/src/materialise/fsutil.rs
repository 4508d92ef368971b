//! Small file-system helpers: every file is written to a temporary name and renamed into place,
//! so a reader (or a crashed build) never sees half a file, and a running binary being replaced
//! keeps its old inode.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use gpuhook_fs::AtomicWriter;

use super::SimError;

/// `path` relative to the driver root (accepts absolute profile paths like `/usr/lib64`).
pub fn under(root: &Path, rel: &str) -> PathBuf {
    root.join(rel.trim_start_matches('/'))
}

pub fn io(op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> SimError {
    let path = path.to_path_buf();
    move |error| SimError::Io { op, path, error }
}

pub fn mkdirs(dir: &Path) -> Result<(), SimError> {
    fs::create_dir_all(dir).map_err(io("create directory", dir))
}

/// Writes `contents` with `mode` atomically through the workspace's one writer (temp file +
/// rename); an identical file is kept. No fsyncs: a simulated node is rebuilt, not recovered.
pub fn write_atomic(path: &Path, contents: &[u8], mode: u32) -> Result<(), SimError> {
    if let Some(parent) = path.parent() {
        mkdirs(parent)?;
    }
    AtomicWriter::new(mode)
        .skip_unchanged()
        .durable(false)
        .write(path, contents)
        .map(drop)
        .map_err(|e| io("write atomically", path)(e.into_io()))
}

/// Copies `src` to `dst` atomically with `mode`; an identical file is kept.
pub fn copy_atomic(src: &Path, dst: &Path, mode: u32) -> Result<(), SimError> {
    let contents = fs::read(src).map_err(io("read", src))?;
    write_atomic(dst, &contents, mode)
}

fn temp_name(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.gpuhook-sim-tmp.{}", std::process::id()))
}

/// Makes `link -> target`, replacing whatever is at `link` unless it already is that link.
pub fn symlink_atomic(target: &str, link: &Path) -> Result<(), SimError> {
    if fs::read_link(link).is_ok_and(|t| t == Path::new(target)) {
        return Ok(());
    }
    if let Some(parent) = link.parent() {
        mkdirs(parent)?;
    }
    let tmp = temp_name(link);
    let _ = fs::remove_file(&tmp);
    symlink(target, &tmp).map_err(io("create symlink", &tmp))?;
    fs::rename(&tmp, link).map_err(io("rename into place", link))
}
