//! Reading files and values whose size someone else chose, with a limit.
//!
//! A container's `config.json`, a CDI spec in a spec directory and a config file are read on
//! the container start path by root processes; a file of hundreds of MB must cost one clear error,
//! not that much memory (a 700 MB `config.json` once cost 790 MB RSS). One helper so every caller
//! checks the same way: the size is checked on the open file (no re-open race) and the read is
//! capped at `limit + 1` bytes even if the file grows meanwhile. [`preview`] caps a value quoted
//! in a message or a log line.
//!
//! This is the crate's (and the workspace's) one bounded reader: discovery (`ld.so.cache`,
//! `/proc/driver`, the inventory cache, under a driver root that may be a container image) and
//! the CDI crate (spec files anyone may drop in a spec directory) map [`BoundedReadError`] into
//! their own typed errors.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Largest `config.json` (OCI runtime spec) read: real ones are a few tens of KiB.
pub const MAX_OCI_CONFIG_BYTES: u64 = 4 << 20;
/// Largest CDI spec file read: a 64-GPU MIG node's spec is well under 1 MiB.
pub const MAX_CDI_SPEC_BYTES: u64 = 16 << 20;
/// Largest config file (TOML) read.
pub const MAX_CONFIG_FILE_BYTES: u64 = 1 << 20;
/// Largest `ld.so.cache` read (real ones are well under 4 MiB).
pub const MAX_LD_CACHE_BYTES: u64 = 64 << 20;
/// Largest inventory cache read.
pub const MAX_INVENTORY_BYTES: u64 = 16 << 20;
/// Largest `/proc/driver` file read.
pub const MAX_PROC_BYTES: u64 = 1 << 20;
/// Characters of a value quoted in a message or log line, before it is cut.
pub const MAX_PREVIEW_CHARS: usize = 200;

/// Why a bounded read failed.
#[derive(Debug, thiserror::Error)]
pub enum BoundedReadError {
    #[error("cannot read {}: {error}", path.display())]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{} is larger than the limit of {limit} bytes; refusing to read it", path.display())]
    TooLarge { path: PathBuf, limit: u64 },
}

impl BoundedReadError {
    /// The I/O error kind, when it is one (e.g. to treat a missing file as defaults).
    pub fn io_kind(&self) -> Option<std::io::ErrorKind> {
        match self {
            BoundedReadError::Io { error, .. } => Some(error.kind()),
            BoundedReadError::TooLarge { .. } => None,
        }
    }
}

/// Reads all of `path`, refusing a file larger than `limit` bytes.
pub fn read_bounded(path: &Path, limit: u64) -> Result<Vec<u8>, BoundedReadError> {
    let io = |error| BoundedReadError::Io {
        path: path.to_path_buf(),
        error,
    };
    let too_large = || BoundedReadError::TooLarge {
        path: path.to_path_buf(),
        limit,
    };
    let file = File::open(path).map_err(io)?;
    let size = file.metadata().map_err(io)?.len();
    if size > limit {
        return Err(too_large());
    }
    // Room for the whole file and the byte that tells its end: one read, not a doubling series.
    // `/proc` files say size 0 whatever they hold: a page for them, grown as needed.
    let room = match size {
        0 => PROC_FILE_ROOM,
        _ => usize::try_from(size.saturating_add(1)).unwrap_or(0),
    };
    read_into(file, limit, Vec::with_capacity(room))
        .map_err(io)?
        .ok_or_else(too_large)
}

/// First buffer for a file that gives no size (`/proc`).
const PROC_FILE_ROOM: usize = 4096;

/// Reads `reader` to its end, at most `limit` bytes; `Ok(None)` when it has more.
pub fn read_bounded_from(reader: impl Read, limit: u64) -> std::io::Result<Option<Vec<u8>>> {
    read_into(reader, limit, Vec::new())
}

/// Reads into `buf`'s free room, each `read` asking for all of it (std's `read_to_end` asks for
/// 8 KiB first and doubles, three reads for a 25 KiB `mig-minors`), growing it when full.
fn read_into(
    mut reader: impl Read,
    limit: u64,
    mut buf: Vec<u8>,
) -> std::io::Result<Option<Vec<u8>>> {
    let most = usize::try_from(limit.saturating_add(1)).unwrap_or(usize::MAX);
    loop {
        let start = buf.len();
        if start >= most {
            return Ok(None);
        }
        if start == buf.capacity() {
            buf.reserve(start.max(PROC_FILE_ROOM).min(most - start));
        }
        buf.resize(buf.capacity().min(most), 0);
        let read = reader.read(&mut buf[start..]);
        buf.truncate(start + read.as_ref().map_or(0, |n| *n));
        match read {
            Ok(0) => return Ok(Some(buf)),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// [`read_bounded`] as UTF-8 text.
pub fn read_bounded_string(path: &Path, limit: u64) -> Result<String, BoundedReadError> {
    let bytes = read_bounded(path, limit)?;
    String::from_utf8(bytes).map_err(|e| BoundedReadError::Io {
        path: path.to_path_buf(),
        error: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
    })
}

/// At most `max` items of a list for a message, joined by `, `, then how many more there are.
pub fn preview_list<T: std::fmt::Display>(items: &[T], max: usize) -> String {
    preview_joined(items, max, ", ")
}

/// [`preview_list`] with another separator (`,` keeps a log field in its usual form).
pub fn preview_joined<T: std::fmt::Display>(items: &[T], max: usize, sep: &str) -> String {
    let mut out = items
        .iter()
        .take(max)
        .map(|i| preview(&i.to_string()))
        .collect::<Vec<_>>()
        .join(sep);
    if items.len() > max {
        out.push_str(&format!(" and {} more", items.len() - max));
    }
    out
}

/// `value` cut to [`MAX_PREVIEW_CHARS`] characters, with how much was cut, for messages.
pub fn preview(value: &str) -> String {
    match value.char_indices().nth(MAX_PREVIEW_CHARS) {
        None => value.to_string(),
        Some((cut, _)) => format!("{}… ({} bytes in all)", &value[..cut], value.len()),
    }
}

/// Bytes of an error message kept whole; a longer one (a parser quoting a hostile value) is cut.
pub const MAX_MESSAGE_BYTES: usize = 1024;

/// `message` unchanged when it is at most [`MAX_MESSAGE_BYTES`]; otherwise its head and tail
/// (where parsers say what they expected) around a marker saying how much was cut. For error
/// messages that quote input, e.g. serde's `invalid type: string "…", expected a map`.
pub fn cap_message(message: &str) -> String {
    if message.len() <= MAX_MESSAGE_BYTES {
        return message.to_string();
    }
    let head_end = floor_char_boundary(message, MAX_MESSAGE_BYTES / 2);
    let tail_start = ceil_char_boundary(message, message.len() - MAX_MESSAGE_BYTES / 4);
    format!(
        "{}… [{} bytes cut] …{}",
        &message[..head_end],
        tail_start - head_end,
        &message[tail_start..]
    )
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn ceil_char_boundary(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_files_over_the_limit_and_reads_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"12345").unwrap();
        assert_eq!(read_bounded(&p, 5).unwrap(), b"12345");
        let err = read_bounded(&p, 4).unwrap_err();
        assert!(matches!(err, BoundedReadError::TooLarge { limit: 4, .. }));
        assert!(
            err.to_string().contains("larger than the limit of 4 bytes"),
            "{err}"
        );
        let missing = read_bounded(&dir.path().join("nope"), 4).unwrap_err();
        assert_eq!(missing.io_kind(), Some(std::io::ErrorKind::NotFound));
        std::fs::write(&p, [0xff, 0xfe]).unwrap();
        assert!(read_bounded_string(&p, 10).is_err());
    }

    #[test]
    fn a_file_is_read_into_one_buffer_of_its_size() {
        // Sized from the file's length (and the byte that shows its end), not grown by doubling
        // with a read per step: discovery reads files of tens of KiB on every `cdi generate`.
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("mig-minors");
        std::fs::write(&p, vec![b'x'; 25_000]).unwrap();
        let buf = read_bounded(&p, MAX_PROC_BYTES).unwrap();
        assert_eq!((buf.len(), buf.capacity()), (25_000, 25_001));
    }

    /// A reader that counts its `read` calls and gives what each asks for.
    struct Counted<'a>(&'a [u8], usize);

    impl Read for Counted<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.1 += 1;
            let n = buf.len().min(self.0.len());
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    #[test]
    fn a_sized_buffer_takes_the_file_in_one_read() {
        // One read for the data and one for the end (std's read_to_end asks for 8 KiB, then
        // 16 KiB, ...: four reads for a 25 KiB `mig-minors`); a file that gives no size
        // (`/proc`) grows its buffer, still within the limit.
        let data = vec![b'x'; 25_000];
        let mut r = Counted(&data, 0);
        let out = read_into(&mut r, MAX_PROC_BYTES, Vec::with_capacity(25_001)).unwrap();
        assert_eq!((out.map(|b| b.len()), r.1), (Some(25_000), 2));
        let mut r = Counted(&data, 0);
        let out = read_into(&mut r, MAX_PROC_BYTES, Vec::with_capacity(PROC_FILE_ROOM)).unwrap();
        assert_eq!(out.map(|b| b.len()), Some(25_000));
        assert!(r.1 <= 5, "{} reads", r.1);
        let mut r = Counted(&data, 0);
        assert_eq!(read_into(&mut r, 24_999, Vec::new()).unwrap(), None);
    }

    #[test]
    fn an_endless_file_stops_at_the_limit() {
        // `/dev/zero` has size 0: the read itself must stop at `limit + 1` bytes.
        let err = read_bounded(Path::new("/dev/zero"), 4096).unwrap_err();
        assert!(
            matches!(err, BoundedReadError::TooLarge { limit: 4096, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("/dev/zero"), "{err}");
    }

    #[test]
    fn a_sparse_huge_file_costs_no_memory() {
        // A 700 MB file (sparse: no disk) is refused from its size, before any read.
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("big.json");
        let f = File::create(&p).unwrap();
        f.set_len(700 << 20).unwrap();
        let err = read_bounded(&p, MAX_OCI_CONFIG_BYTES).unwrap_err();
        assert!(matches!(err, BoundedReadError::TooLarge { .. }), "{err}");
    }

    #[test]
    fn preview_cuts_long_values() {
        assert_eq!(preview("abc"), "abc");
        let long = "é".repeat(MAX_PREVIEW_CHARS + 50);
        let p = preview(&long);
        assert!(p.starts_with(&"é".repeat(MAX_PREVIEW_CHARS)), "{p}");
        assert!(
            p.ends_with(&format!("({} bytes in all)", long.len())),
            "{p}"
        );
        assert_eq!(preview_list(&[1, 2, 3], 2), "1, 2 and 1 more");
        assert_eq!(preview_list(&[1, 2], 2), "1, 2");
        assert_eq!(preview_joined(&["a", "b"], 5, ","), "a,b");
        assert_eq!(read_bounded_from(&b"abc"[..], 2).unwrap(), None);
        assert_eq!(read_bounded_from(&b"ab"[..], 2).unwrap().unwrap(), b"ab");
    }

    #[test]
    fn long_messages_keep_head_and_tail_and_say_what_was_cut() {
        let short = "invalid type: integer, expected a string";
        assert_eq!(cap_message(short), short);
        let long = format!(
            "invalid type: string \"{}é\", expected a map",
            "x".repeat(5000)
        );
        let capped = cap_message(&long);
        assert!(capped.len() < MAX_MESSAGE_BYTES + 64, "{}", capped.len());
        assert!(capped.starts_with("invalid type: string \"xxx"), "{capped}");
        assert!(capped.ends_with("é\", expected a map"), "{capped}");
        assert!(capped.contains("bytes cut]"), "{capped}");
    }
}
