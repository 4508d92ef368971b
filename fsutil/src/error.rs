//! Why a write failed: the path and the step, with the OS error in the message (and not again as
//! a `source`, so a cause chain prints it once).

use std::fmt;
use std::io;
use std::path::PathBuf;

/// The step of [`crate::AtomicWriter::write`] that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Looking at what is at the target path now.
    Inspect,
    /// Reading the file to be replaced (for the unchanged or ownership check).
    ReadExisting,
    /// Creating the temporary file in the target's directory.
    CreateTemp,
    Write,
    Chmod,
    Fsync,
    /// Renaming the temporary file over the target.
    Rename,
}

impl Step {
    /// The step as the verb of an error message: "cannot {step} {path}".
    pub fn as_str(self) -> &'static str {
        match self {
            Step::Inspect => "inspect",
            Step::ReadExisting => "read",
            Step::CreateTemp => "create a temporary file in",
            Step::Write => "write",
            Step::Chmod => "chmod",
            Step::Fsync => "fsync",
            Step::Rename => "rename into place",
        }
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why an existing file is not the caller's to replace (the caller's ownership check says).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct NotOurs {
    pub reason: String,
}

impl NotOurs {
    pub fn new(reason: impl Into<String>) -> Self {
        NotOurs {
            reason: reason.into(),
        }
    }
}

/// A failed atomic write. The target (or, for a temporary file, its directory) is untouched and
/// no temporary file is left.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("{} does not name a file", path.display())]
    NoFileName { path: PathBuf },
    /// Something other than a regular file is at the path (a directory, a symlink, a FIFO...).
    #[error("refusing to replace {}: it is a {what}, not a regular file (remove it or choose another path)", path.display())]
    NotRegular { path: PathBuf, what: &'static str },
    /// The caller's ownership check refused the existing file.
    #[error("refusing to replace {}: {reason} (remove it or choose another path)", path.display())]
    NotOurs { path: PathBuf, reason: NotOurs },
    /// The existing file is larger than the ownership check reads.
    #[error("{} is larger than {limit} bytes; refusing to replace it", path.display())]
    TooLarge { path: PathBuf, limit: u64 },
    #[error("cannot {step} {}: {error}", path.display())]
    Io {
        step: Step,
        path: PathBuf,
        error: io::Error,
    },
}

impl WriteError {
    pub(crate) fn io(step: Step, path: impl Into<PathBuf>, error: io::Error) -> Self {
        WriteError::Io {
            step,
            path: path.into(),
            error,
        }
    }

    /// The path the error is about (the target, or the directory for [`Step::CreateTemp`]).
    pub fn path(&self) -> &std::path::Path {
        match self {
            WriteError::NoFileName { path }
            | WriteError::NotRegular { path, .. }
            | WriteError::NotOurs { path, .. }
            | WriteError::TooLarge { path, .. }
            | WriteError::Io { path, .. } => path,
        }
    }

    /// The error as an [`io::Error`], for callers whose own error names the path and wraps an
    /// I/O error: the OS error itself for an I/O step, else this error's message.
    pub fn into_io(self) -> io::Error {
        match self {
            WriteError::Io { error, .. } => error,
            WriteError::NoFileName { .. } => io::Error::new(io::ErrorKind::InvalidInput, self),
            WriteError::NotRegular { .. } | WriteError::NotOurs { .. } => {
                io::Error::new(io::ErrorKind::AlreadyExists, self)
            }
            WriteError::TooLarge { .. } => io::Error::new(io::ErrorKind::InvalidData, self),
        }
    }
}
