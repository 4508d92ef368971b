//! Small file-system helpers: every file is written to a temporary name and renamed into place,
//! so a reader (or a crashed build) never sees half a file, and a running binary being replaced
//! keeps its old inode.

use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};

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

fn temp_name(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.gpuhook-sim-tmp.{}", std::process::id()))
}

/// True when `path` is a regular file (not a link) with exactly `contents` and `mode`.
fn unchanged(path: &Path, contents: &[u8], mode: u32) -> bool {
    fs::symlink_metadata(path).is_ok_and(|m| {
        m.is_file() && m.permissions().mode() & 0o7777 == mode && m.len() == contents.len() as u64
    }) && fs::read(path).is_ok_and(|old| old == contents)
}

/// Writes `contents` with `mode` atomically (temp file + rename); an identical file is kept.
pub fn write_atomic(path: &Path, contents: &[u8], mode: u32) -> Result<(), SimError> {
    if unchanged(path, contents, mode) {
        return Ok(());
    }
    if let Some(parent) = path.parent() {
        mkdirs(parent)?;
    }
    let tmp = temp_name(path);
    let _ = fs::remove_file(&tmp);
    fs::write(&tmp, contents).map_err(io("write", &tmp))?;
    fs::set_permissions(&tmp, fs::Permissions::from_mode(mode)).map_err(io("chmod", &tmp))?;
    fs::rename(&tmp, path).map_err(io("rename into place", path))
}

/// Copies `src` to `dst` atomically with `mode`; an identical file is kept.
pub fn copy_atomic(src: &Path, dst: &Path, mode: u32) -> Result<(), SimError> {
    let contents = fs::read(src).map_err(io("read", src))?;
    if unchanged(dst, &contents, mode) {
        return Ok(());
    }
    if let Some(parent) = dst.parent() {
        mkdirs(parent)?;
    }
    let tmp = temp_name(dst);
    let _ = fs::remove_file(&tmp);
    fs::write(&tmp, &contents).map_err(io("write", &tmp))?;
    fs::set_permissions(&tmp, fs::Permissions::from_mode(mode)).map_err(io("chmod", &tmp))?;
    fs::rename(&tmp, dst).map_err(io("rename into place", dst))
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
