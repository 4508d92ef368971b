//! What is at the target path before a write: looked at without following a symlink and read
//! without blocking on a FIFO, so whatever someone put there cannot hang or redirect the writer.

use std::fs::{File, OpenOptions, Permissions};
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use crate::{Step, WriteError};

/// The regular file at the target path.
pub(crate) struct Existing {
    /// Open only when its content was asked for.
    file: Option<File>,
    pub mode: u32,
    pub owner: (u32, u32),
    /// Its content, when asked for and not over the limit.
    pub content: Option<Vec<u8>>,
}

impl Existing {
    /// The file at `path`, `None` when there is none; an error for anything but a regular file.
    /// With `read_limit`, its content is read when it has at most that many bytes.
    pub fn open(path: &Path, read_limit: Option<u64>) -> Result<Option<Existing>, WriteError> {
        let meta = match std::fs::symlink_metadata(path) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(WriteError::io(Step::Inspect, path, e)),
        };
        refuse_non_regular(path, &meta.file_type())?;
        let Some(limit) = read_limit else {
            // Nothing to read (the hot path of a bundle's config.json): the rename replaces the
            // directory entry whatever it is by then, so the lstat is all we need.
            return Ok(Some(Existing {
                file: None,
                mode: meta.mode() & 0o7777,
                owner: (meta.uid(), meta.gid()),
                content: None,
            }));
        };
        let file = match open_no_follow(path)? {
            Some(f) => f,
            None => return Ok(None),
        };
        let meta = file
            .metadata()
            .map_err(|e| WriteError::io(Step::Inspect, path, e))?;
        refuse_non_regular(path, &meta.file_type())?;
        let mut content = None;
        if meta.len() <= limit {
            // Room for the whole file and the byte that tells its end: one read, not a doubling
            // series of reads (the unchanged spec or cache is read on every refresh).
            let room = usize::try_from(meta.len().saturating_add(1)).unwrap_or(0);
            let mut buf = Vec::with_capacity(room);
            (&file)
                .take(limit.saturating_add(1))
                .read_to_end(&mut buf)
                .map_err(|e| WriteError::io(Step::ReadExisting, path, e))?;
            if u64::try_from(buf.len()).is_ok_and(|n| n <= limit) {
                content = Some(buf);
            }
        }
        Ok(Some(Existing {
            file: Some(file),
            mode: meta.mode() & 0o7777,
            owner: (meta.uid(), meta.gid()),
            content,
        }))
    }

    /// Gives the (unchanged) file `mode` when it has another one.
    pub fn set_mode(&self, path: &Path, mode: u32) -> Result<(), WriteError> {
        match &self.file {
            Some(file) if self.mode != mode => file
                .set_permissions(Permissions::from_mode(mode))
                .map_err(|e| WriteError::io(Step::Chmod, path, e)),
            _ => Ok(()),
        }
    }
}

/// `path` opened for reading without following a symlink or blocking on a FIFO; `None` when it
/// was removed since it was looked at.
fn open_no_follow(path: &Path) -> Result<Option<File>, WriteError> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path);
    match file {
        Ok(f) => Ok(Some(f)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        // O_NOFOLLOW on a symlink swapped in since.
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => Err(WriteError::NotRegular {
            path: path.to_path_buf(),
            what: "symlink",
        }),
        Err(e) => Err(WriteError::io(Step::Inspect, path, e)),
    }
}

fn refuse_non_regular(path: &Path, ft: &std::fs::FileType) -> Result<(), WriteError> {
    let what = if ft.is_file() {
        return Ok(());
    } else if ft.is_symlink() {
        "symlink"
    } else if ft.is_dir() {
        "directory"
    } else if ft.is_fifo() {
        "FIFO"
    } else if ft.is_socket() {
        "socket"
    } else {
        "device"
    };
    Err(WriteError::NotRegular {
        path: path.to_path_buf(),
        what,
    })
}
