//! Why the CUDA compat note of a library could not be read.

use std::io;

/// Why the note could not be read: the file is not a readable ELF or the note is malformed (the
/// caller falls back to the major-version rule, as NVIDIA's hook does).
#[derive(Debug, thiserror::Error)]
pub enum NoteError {
    #[error("{what} is {len} bytes, more than the limit of {limit}")]
    TooLarge {
        what: &'static str,
        len: u64,
        limit: u64,
    },
    #[error("{what} lies outside the file")]
    OutsideFile { what: &'static str },
    #[error("{what}: unexpected end of file")]
    Truncated { what: &'static str },
    #[error("{what}: {error}")]
    Io {
        what: &'static str,
        error: io::Error,
    },
    #[error("not an ELF file")]
    NotElf,
    #[error("unknown ELF class or byte order")]
    UnknownClass,
    #[error("truncated ELF header")]
    TruncatedHeader,
    #[error("unsupported section table ({sections} sections, entry size {entry_size})")]
    SectionTable { sections: u64, entry_size: u64 },
    #[error("note shorter than its header")]
    ShortNote,
    #[error("note is not JSON: {error}")]
    NotJson { error: serde_json::Error },
    #[error("note: `{field}` {problem}")]
    BadField {
        field: &'static str,
        problem: &'static str,
    },
    /// The file could not be opened through the container root (see `read_compat_note`).
    #[error("{0}")]
    Open(String),
    #[error("not a regular file")]
    NotRegular,
}
