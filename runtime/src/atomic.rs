//! Atomic file replacement: a reader (runc, containerd) sees the old file or the new one, never
//! half of it, and a failure leaves the old file in place.

use std::fs::{self, File, OpenOptions, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Writes `bytes` to `path` through a temporary file in the same directory, fsync and rename.
///
/// The new file gets the mode and owner of the file it replaces, or `default_mode` for a new file.
pub fn write_atomic(path: &Path, bytes: &[u8], default_mode: u32) -> io::Result<()> {
    write_atomic_with(path, bytes, default_mode, true)
}

/// [`write_atomic`], with the fsyncs only when `durable`. A bundle's `config.json` needs atomicity
/// (runc reads it right after) but not durability: the bundle lives only as long as the
/// container, on a crash it is recreated, and two fsyncs cost several milliseconds on every
/// GPU container start on a busy disk.
pub fn write_atomic_with(
    path: &Path,
    bytes: &[u8],
    default_mode: u32,
    durable: bool,
) -> io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
    let old = fs::metadata(path).ok();
    let mode = old.as_ref().map_or(default_mode, |m| m.mode() & 0o7777);
    let mut tmp = None;
    for attempt in 0..100u32 {
        let candidate = dir.join(format!(
            ".{}.{}.{attempt}.tmp",
            name.to_string_lossy(),
            std::process::id()
        ));
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&candidate)
        {
            Ok(f) => {
                tmp = Some((candidate, f));
                break;
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    let (tmp_path, mut file) = tmp.ok_or_else(|| {
        io::Error::new(io::ErrorKind::AlreadyExists, "no free temporary file name")
    })?;
    let result = (|| {
        file.write_all(bytes)?;
        if let Some(m) = &old {
            // Keep the owner; only root can chown, and failing to is not worth losing the write.
            let _ = std::os::unix::fs::fchown(&file, Some(m.uid()), Some(m.gid()));
        }
        file.set_permissions(Permissions::from_mode(mode))?;
        if durable {
            file.sync_all()?;
        }
        fs::rename(&tmp_path, path)?;
        // Make the rename durable; a directory that cannot be opened is not an error.
        if durable {
            if let Ok(d) = File::open(&dir) {
                let _ = d.sync_all();
            }
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp_path);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_content_keeps_mode_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("config.json");
        fs::write(&p, b"old").unwrap();
        fs::set_permissions(&p, Permissions::from_mode(0o640)).unwrap();
        write_atomic(&p, b"new", 0o644).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"new");
        assert_eq!(fs::metadata(&p).unwrap().mode() & 0o7777, 0o640);
        let names: Vec<_> = fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1);
    }

    #[test]
    fn new_file_gets_default_mode() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.toml");
        write_atomic(&p, b"a = 1\n", 0o644).unwrap();
        assert_eq!(fs::metadata(&p).unwrap().mode() & 0o7777, 0o644);
    }

    #[test]
    fn failure_keeps_the_old_file() {
        let dir = tempfile::tempdir().unwrap();
        // A directory in the way: rename fails.
        let p = dir.path().join("d");
        fs::create_dir(&p).unwrap();
        fs::write(p.join("keep"), b"x").unwrap();
        assert!(write_atomic(&p, b"new", 0o644).is_err());
        assert!(p.join("keep").exists());
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
