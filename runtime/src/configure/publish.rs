//! Writing the planned files of every `runtime configure` engine (containerd, Docker, CRI-O) and
//! of the OCI hook file: a backup of what is replaced, an atomic write (`gpuhook-fs`) keeping the
//! file's mode and owner, and never over a file that changed since it was read (the writer
//! re-reads it and compares with what the plan was made from: an admin's or a config manager's
//! edit in between is not lost, the run fails and says to re-run).

use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use crate::configure::{ConfigureError, FileChange};

/// Largest config file read or compared (real ones are KiBs).
pub const MAX_CONFIG_BYTES: u64 = 4 << 20;

/// Reads `path`; `None` when it does not exist; refuses a file over [`MAX_CONFIG_BYTES`].
pub fn read_bounded(path: &Path) -> Result<Option<String>, ConfigureError> {
    match fs::metadata(path) {
        Ok(md) if md.len() > MAX_CONFIG_BYTES => {
            return Err(ConfigureError::TooLarge {
                path: path.into(),
                limit: MAX_CONFIG_BYTES,
            })
        }
        Ok(_) => {}
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(error) => {
            return Err(ConfigureError::Read {
                path: path.into(),
                error,
            })
        }
    }
    match fs::read_to_string(path) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(error) => Err(ConfigureError::Read {
            path: path.into(),
            error,
        }),
    }
}

/// Refuses `dir` when it is a symlink: a drop-in or hooks directory linked elsewhere would put
/// our file where the admin did not look (and where the engine may not read).
pub fn refuse_symlinked_dir(dir: &Path) -> Result<(), ConfigureError> {
    match fs::symlink_metadata(dir) {
        Ok(md) if md.file_type().is_symlink() => Err(ConfigureError::DirIsSymlink {
            dir: dir.into(),
            target: fs::read_link(dir).unwrap_or_default(),
        }),
        _ => Ok(()),
    }
}

/// A free backup name `PATH.bak.<UTC time>[.N]`.
pub fn backup_path(path: &Path) -> PathBuf {
    let stamp: String = crate::timestamp::rfc3339(std::time::SystemTime::now())
        .chars()
        .filter(|c| !matches!(c, '-' | ':'))
        .collect();
    let base = format!("{}.bak.{stamp}", path.display());
    let mut candidate = PathBuf::from(&base);
    let mut n = 1;
    while candidate.exists() {
        candidate = PathBuf::from(format!("{base}.{n}"));
        n += 1;
    }
    candidate
}

/// Writes each change in order (backing up the existing files `backup` selects, setting
/// `FileChange::backup`); stops at the first error.
pub fn publish(
    changes: &mut [FileChange],
    backup: impl Fn(&FileChange) -> bool,
) -> Result<(), ConfigureError> {
    for c in changes {
        if let Some(parent) = c.path.parent() {
            fs::create_dir_all(parent).map_err(|error| ConfigureError::Write {
                path: c.path.clone(),
                error,
            })?;
        }
        if c.before.is_some() && backup(c) {
            let to = backup_path(&c.path);
            fs::copy(&c.path, &to).map_err(|error| ConfigureError::Backup {
                path: c.path.clone(),
                backup: to.clone(),
                error,
            })?;
            c.backup = Some(to);
        }
        write_unless_changed(&c.path, c.before.as_deref(), &c.after)?;
    }
    Ok(())
}

/// Atomically replaces `path` with `after`, only while it still holds `before` (`None`: it
/// must still not exist).
fn write_unless_changed(
    path: &Path,
    before: Option<&str>,
    after: &str,
) -> Result<(), ConfigureError> {
    let unchanged = |now: &[u8]| match before {
        Some(b) if now == b.as_bytes() => Ok(()),
        _ => Err(gpuhook_fs::NotOurs::new("it changed since it was read")),
    };
    let writer = gpuhook_fs::AtomicWriter::new(0o644)
        .keep_mode()
        .keep_owner()
        .owner_check(&unchanged, MAX_CONFIG_BYTES);
    match writer.write(path, after.as_bytes()) {
        Ok(_) => Ok(()),
        Err(gpuhook_fs::WriteError::NotOurs { .. } | gpuhook_fs::WriteError::TooLarge { .. }) => {
            Err(ConfigureError::ChangedSince { path: path.into() })
        }
        Err(e) => Err(ConfigureError::Write {
            path: path.into(),
            error: e.into_io(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(path: &Path, before: Option<&str>, after: &str) -> FileChange {
        FileChange {
            path: path.into(),
            before: before.map(str::to_string),
            after: after.into(),
            backup: None,
        }
    }

    #[test]
    fn a_file_edited_since_it_was_read_is_never_overwritten() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("daemon.json");
        fs::write(&f, "{\"a\": 2}\n").unwrap();
        // Planned from `{"a": 1}`, but the file now holds the admin's newer edit.
        let mut c = [change(&f, Some("{\"a\": 1}\n"), "{}\n")];
        let err = publish(&mut c, |_| true).unwrap_err();
        assert!(matches!(err, ConfigureError::ChangedSince { .. }), "{err}");
        assert!(err.to_string().contains(f.to_str().unwrap()), "{err}");
        assert_eq!(fs::read_to_string(&f).unwrap(), "{\"a\": 2}\n");
        // A file planned as new that someone created meanwhile is not replaced either.
        let g = d.path().join("new.toml");
        fs::write(&g, "theirs\n").unwrap();
        let err = publish(&mut [change(&g, None, "ours\n")], |_| true).unwrap_err();
        assert!(matches!(err, ConfigureError::ChangedSince { .. }), "{err}");
        assert_eq!(fs::read_to_string(&g).unwrap(), "theirs\n");
    }

    #[test]
    fn the_replaced_file_is_backed_up_and_keeps_its_mode() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("daemon.json");
        fs::write(&f, "{}\n").unwrap();
        fs::set_permissions(&f, fs::Permissions::from_mode(0o600)).unwrap();
        let mut c = [change(&f, Some("{}\n"), "{\"x\": 1}\n")];
        publish(&mut c, |_| true).unwrap();
        assert_eq!(fs::read_to_string(&f).unwrap(), "{\"x\": 1}\n");
        let backup = c[0].backup.clone().unwrap();
        assert_eq!(fs::read_to_string(backup).unwrap(), "{}\n");
        let mode = fs::metadata(&f).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }

    #[test]
    fn a_symlinked_directory_is_refused() {
        let d = tempfile::tempdir().unwrap();
        fs::create_dir(d.path().join("real")).unwrap();
        std::os::unix::fs::symlink(d.path().join("real"), d.path().join("link")).unwrap();
        let err = refuse_symlinked_dir(&d.path().join("link")).unwrap_err();
        assert!(err.to_string().contains("is a symlink to"), "{err}");
        refuse_symlinked_dir(&d.path().join("real")).unwrap();
        refuse_symlinked_dir(&d.path().join("absent")).unwrap();
    }
}
