//! Explaining CDI device conflicts: `gpuhook cdi list` and `gpuhook cdi generate` say which files
//! define the same device, which one a runtime takes, and what to do.
//!
//! The common case is NVIDIA's toolkit spec (`nvidia.yaml`, kind `nvidia.com/gpu`, device names
//! `0`, `GPU-…`, `all`) next to gpuhook's: in one directory the runtimes' CDI library drops every
//! device both define; in two directories the later one wins (container-device-interface
//! pkg/cdi/cache.go `refresh`).

use std::path::{Path, PathBuf};

use gpuhook_cdi::{ConflictGroup, Registry};

/// At most this many device names are shown in one line.
const SHOWN_NAMES: usize = 4;

/// `a, b, c, d and 12 more`.
pub(super) fn some_names(names: &[String]) -> String {
    let mut shown: Vec<String> = names
        .iter()
        .take(SHOWN_NAMES)
        .map(|n| gpuhook_cdi::error::capped(n))
        .collect();
    if names.len() > SHOWN_NAMES {
        shown.push(format!("and {} more", names.len() - SHOWN_NAMES));
    }
    shown.join(", ")
}

fn file_list(files: &[PathBuf]) -> String {
    let shown: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    shown.join(" and ")
}

/// One line per group of conflicting devices.
pub(super) fn explain(group: &ConflictGroup) -> String {
    let n = group.devices.len();
    let names = some_names(&group.devices);
    let files = file_list(&group.files);
    let same_dir = group
        .files
        .windows(2)
        .all(|w| w[0].parent() == w[1].parent());
    match &group.winner {
        Some(w) => format!(
            "note: {n} device(s) ({names}) are defined by {files}: runtimes use {} (a later spec \
             directory wins)",
            w.display()
        ),
        None if same_dir => format!(
            "conflict: {n} device(s) ({names}) are defined by both {files} in one directory: \
             runtimes drop them. Keep one file: remove the other, or let `gpuhook cdi generate \
             --force` take over the other file's name"
        ),
        None => format!(
            "conflict: {n} device(s) ({names}) are defined by {files}, and twice within one \
             spec directory: runtimes drop them. Keep one file per directory"
        ),
    }
}

/// Whether `error` is the registry's per-device message of a conflict shown by [`explain`].
pub(super) fn is_conflict_error(registry: &Registry, path: &Path, message: &str) -> bool {
    registry.conflicts.iter().any(|c| {
        c.winner.is_none() && c.files.last().map(PathBuf::as_path) == Some(path) && {
            message.starts_with(&format!("device {} is also defined in", c.device))
        }
    })
}
