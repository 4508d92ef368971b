//! Where `gpuhook cdi generate` writes when other spec files define the same devices.
//!
//! Runtimes drop a device that two files of one spec directory define, so writing gpuhook's
//! `nvidia.com-gpu.json` next to NVIDIA's `nvidia.yaml` (kind `nvidia.com/gpu`, same names)
//! would take every GPU away from every container. So, before writing:
//! - a file of the output directory that gpuhook wrote earlier under another name (an earlier
//!   take-over) is rewritten in place instead;
//! - a file of another tool is replaced only with `--force` (gpuhook's spec then takes its name,
//!   so there is still one file; the default-named file, if gpuhook wrote one, is removed);
//!   without it, generation fails saying what to do;
//! - a file in another spec directory is reported with the one the runtimes will use.

use std::path::{Path, PathBuf};

use gpuhook_cdi::{is_ours, read_spec_file, Format, Spec};

use super::conflicts::some_names;
use crate::cli::CdiCliError;

/// Another spec file defining some of the same qualified devices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Rival {
    pub path: PathBuf,
    /// `None`: gpuhook wrote it; else why it is not ours.
    pub foreign: Option<String>,
    pub shared: Vec<String>,
}

/// Where to write, and which old file of ours to remove afterwards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Target {
    pub path: PathBuf,
    pub format: Format,
    /// Force an existing file of another tool to be replaced.
    pub replace_foreign: bool,
    pub retire: Option<PathBuf>,
}

fn spec_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| Format::from_path(p).is_some() && p.is_file())
        .collect();
    files.sort();
    files
}

/// The files of `dir` (other than `skip`) that define devices of `spec`.
pub(super) fn rivals_in(dir: &Path, spec: &Spec, skip: &Path) -> Vec<Rival> {
    let ours: Vec<String> = spec.qualified_devices().map(|(n, _)| n).collect();
    let mut out = Vec::new();
    for path in spec_files(dir).into_iter().filter(|p| p != skip) {
        let Ok(bytes) = read_spec_file(&path) else {
            continue;
        };
        let Ok(other) = Spec::from_slice(&bytes, Format::from_path(&path)) else {
            continue;
        };
        let shared: Vec<String> = other
            .qualified_devices()
            .map(|(n, _)| n)
            .filter(|n| ours.contains(n))
            .collect();
        if !shared.is_empty() {
            let foreign = is_ours(&other, &spec.kind).err().map(|e| e.to_string());
            out.push(Rival {
                path,
                foreign,
                shared,
            });
        }
    }
    out
}

impl Target {
    /// Exactly `path`.
    pub(super) fn plain(path: &Path, format: Format) -> Target {
        Target {
            path: path.to_path_buf(),
            format,
            replace_foreign: false,
            retire: None,
        }
    }
}

/// Whether `dir` is one of the runtimes' spec directories (the only place a conflict matters:
/// `cdi-specs/` may hold one spec per node profile, all of one kind).
///
/// The same directory is the same inode (a `stat` each, not a `readlink` per component); a
/// directory that does not exist yet matches a spec directory of the same name.
pub(super) fn is_spec_dir(dir: &Path, spec_dirs: &[PathBuf]) -> bool {
    use std::os::unix::fs::MetadataExt;
    let id = |p: &Path| std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()));
    match id(dir) {
        Some(dir) => spec_dirs.iter().any(|d| id(d) == Some(dir)),
        None => spec_dirs.iter().any(|d| d == dir),
    }
}

/// Decides where the spec goes when it is meant for `out` (format `format`) in a spec
/// directory. `named`: the operator named the file (`--output FILE`); it is never redirected.
pub(super) fn target(
    spec: &Spec,
    out: &Path,
    format: Format,
    force: bool,
    named: bool,
) -> Result<Target, CdiCliError> {
    let dir = out.parent().unwrap_or(Path::new("."));
    let plain = Target::plain(out, format);
    let rivals = rivals_in(dir, spec, out);
    let [rival] = rivals.as_slice() else {
        if rivals.is_empty() {
            return Ok(plain);
        }
        let paths: Vec<String> = rivals
            .iter()
            .map(|r| r.path.display().to_string())
            .collect();
        return Err(CdiCliError::Rivals {
            count: rivals.len(),
            dir: dir.to_path_buf(),
            kind: spec.kind.clone(),
            files: paths.join(", "),
        });
    };
    if named {
        return Err(CdiCliError::NamedRival {
            rival: rival.path.clone(),
            shared: rival.shared.len(),
            names: some_names(&rival.shared),
            dir: dir.to_path_buf(),
        });
    }
    if let Some(reason) = &rival.foreign {
        if !force {
            return Err(CdiCliError::ForeignRival {
                rival: rival.path.clone(),
                shared: rival.shared.len(),
                names: some_names(&rival.shared).into(),
                dir: dir.to_path_buf(),
                reason: reason.as_str().into(),
                out: out.to_path_buf(),
            });
        }
    }
    let retire = out.is_file().then(|| out.to_path_buf());
    Ok(Target {
        format: Format::from_path(&rival.path).unwrap_or(format),
        path: rival.path.clone(),
        replace_foreign: rival.foreign.is_some(),
        retire,
    })
}

/// Notes on files in the other spec directories that define the same devices.
pub(super) fn other_dirs(spec: &Spec, out: &Path, spec_dirs: &[PathBuf]) -> Vec<String> {
    let dir = out.parent().unwrap_or(Path::new("."));
    let ours = spec_dirs.iter().position(|d| d == dir);
    let mut notes = Vec::new();
    for (i, d) in spec_dirs.iter().enumerate().filter(|(_, d)| *d != dir) {
        for r in rivals_in(d, spec, out) {
            let winner = match ours {
                Some(o) if o > i => out.display().to_string(),
                _ => r.path.display().to_string(),
            };
            notes.push(format!(
                "{} also defines {} of these devices ({}): runtimes use {winner} (a later spec \
                 directory wins)",
                r.path.display(),
                r.shared.len(),
                some_names(&r.shared)
            ));
        }
    }
    notes
}

#[cfg(test)]
#[path = "takeover_tests.rs"]
mod tests;
