//! Noticing that the files behind the advertisement may have changed, cheaply (every poll):
//! a stamp of (mtime, size, inode) of each watched path and of a directory's entries.
//!
//! A ConfigMap volume publishes a change by swapping its `..data` symlink to a new timestamped
//! directory; `..data` and its target are stamped explicitly, before (and besides) the bounded
//! list of entries, so a change is noticed however many entries the directory holds (#22: the
//! first 256 entries in directory order could leave `..data` out). The entries read are bounded
//! by what a config set may hold ([`gpuhook_sharing::set::MAX_CONFIGS`]) plus a margin.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Entries of a watched directory stamped at most (a config set holds at most `MAX_CONFIGS`
/// files; `..data`, its target and a few others besides).
pub const MAX_ENTRIES: usize = gpuhook_sharing::set::MAX_CONFIGS + 16;
/// A ConfigMap volume's current-data symlink.
const DATA_LINK: &str = "..data";

/// (mtime, size, inode) of a path, following symlinks.
pub type Meta = (SystemTime, u64, u64);

/// What a stamp records of one path: its metadata, and a symlink's target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    pub path: PathBuf,
    pub meta: Option<Meta>,
    pub link: Option<PathBuf>,
}

/// The stamp of a set of watched paths.
pub type Stamp = Vec<Mark>;

/// (mtime, size, inode) of `p` (symlinks followed), `None` when it cannot be read.
pub fn meta(p: &Path) -> Option<Meta> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(p).ok()?;
    Some((m.modified().ok()?, m.len(), m.ino()))
}

fn mark(p: PathBuf) -> Mark {
    Mark {
        meta: meta(&p),
        link: std::fs::read_link(&p).ok(),
        path: p,
    }
}

/// The stamp of `paths`: each path, and for a directory its `..data` link first, then up to
/// [`MAX_ENTRIES`] entries (sorted).
pub fn stamp(paths: &[PathBuf]) -> Stamp {
    let mut out = Vec::new();
    for p in paths {
        out.push(mark(p.clone()));
        let Ok(rd) = std::fs::read_dir(p) else {
            continue;
        };
        out.push(mark(p.join(DATA_LINK)));
        let mut entries: Vec<PathBuf> = rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|e| e.file_name().is_some_and(|n| n != DATA_LINK))
            .take(MAX_ENTRIES)
            .collect();
        entries.sort();
        out.extend(entries.into_iter().map(mark));
    }
    out
}

#[cfg(test)]
#[path = "changes_tests.rs"]
mod tests;
