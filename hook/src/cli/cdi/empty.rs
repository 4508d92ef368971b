//! `gpuhook cdi generate` on a node with nothing to describe.
//!
//! A node whose GPUs all have MIG mode on and no MIG instance (after `nvidia-smi mig -dci -dgi`,
//! profile `h100-mig-empty`) has no CDI device, and a CDI spec needs one. NVIDIA's
//! `nvidia-ctk cdi generate` (v1.20) fails there ("invalid device, empty device edits") and
//! leaves its old spec, which then lists MIG devices that no longer exist: runtimes still offer
//! them and containers fail at start with a missing cap node. What an admin expects after
//! destroying the last instance is that the devices are gone. So by default the spec file gpuhook
//! wrote at the output (never a file of another tool) is removed, the inventory cache follows, and
//! generation succeeds with a warning that says why and how to get devices back; `--fail-on-empty`
//! keeps NVIDIA's error (and the old file) for scripts. Stdout output stays an error: there is no
//! file to keep in step and an empty spec is not valid.

use std::path::{Path, PathBuf};

use gpuhook_cdi::{is_ours, read_spec_file, CdiError, Format, Spec};

/// What happened to one spec file of ours.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Stale {
    Removed(PathBuf),
    /// Left in place: not gpuhook's (or unreadable), so not ours to remove.
    Kept(PathBuf, String),
}

/// Why a spec file is not one gpuhook may remove.
#[derive(Debug, thiserror::Error)]
enum NotOurs {
    /// Unreadable or not a spec: gpuhook-cdi's error names the file and the problem.
    #[error(transparent)]
    Unreadable(#[from] CdiError),
    /// A spec of another tool or kind (gpuhook-cdi's `is_ours` says which).
    #[error("{0}")]
    Foreign(String),
}

/// Whether `path` holds a spec gpuhook wrote for `kind` (`Err`: why not).
fn ours(path: &Path, kind: &str) -> Result<(), NotOurs> {
    let bytes = read_spec_file(path)?;
    let spec = Spec::from_slice(&bytes, Format::from_path(path))?;
    is_ours(&spec, kind).map_err(|why| NotOurs::Foreign(why.to_string()))
}

/// Removes gpuhook's spec of `kind` at `out`, and with `whole_dir` (the default file name in a
/// spec directory, where an earlier take-over may have renamed it) any other file of `out`'s
/// directory that gpuhook wrote for `kind`. Files of other tools are left alone.
pub(super) fn remove_stale(out: &Path, kind: &str, whole_dir: bool) -> Vec<Stale> {
    let mut candidates = vec![out.to_path_buf()];
    if whole_dir {
        if let Ok(entries) = std::fs::read_dir(out.parent().unwrap_or(Path::new("."))) {
            let mut more: Vec<PathBuf> = entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p != out && Format::from_path(p).is_some() && p.is_file())
                .collect();
            more.sort();
            candidates.extend(more);
        }
    }
    let mut out_list = Vec::new();
    for (i, path) in candidates.into_iter().enumerate() {
        if std::fs::symlink_metadata(&path).is_err() {
            continue;
        }
        match ours(&path, kind) {
            Ok(()) => match std::fs::remove_file(&path) {
                Ok(()) => out_list.push(Stale::Removed(path)),
                Err(e) => out_list.push(Stale::Kept(path, format!("cannot remove it: {e}"))),
            },
            // Only the output path itself is worth a word; other tools' files are their business.
            Err(why) if i == 0 => out_list.push(Stale::Kept(path, why.to_string())),
            Err(_) => {}
        }
    }
    out_list
}

/// The one warning line: why there is no spec, what became of the old one, how to get devices.
pub(super) fn warning(reason: &str, stale: &[Stale]) -> String {
    let mut done: Vec<String> = stale
        .iter()
        .map(|s| match s {
            Stale::Removed(p) => format!("removed {} (its devices no longer exist)", p.display()),
            Stale::Kept(p, why) => format!(
                "left {} in place ({}): remove it if its devices are gone",
                p.display(),
                gpuhook_node::bounded::preview(why)
            ),
        })
        .collect();
    if done.is_empty() {
        done.push("no spec written".into());
    }
    format!(
        "gpuhook: warning: the node has no GPU or MIG device to describe: {reason}; {} \
         (--fail-on-empty makes this an error)",
        done.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(kind: &str, hook: &str) -> Vec<u8> {
        let arg0 = Path::new(hook).file_name().unwrap().to_str().unwrap();
        format!(
            r#"{{"cdiVersion":"0.5.0","kind":"{kind}","devices":[{{"name":"0","containerEdits":{{"deviceNodes":[{{"path":"/dev/nvidia0"}}]}}}}],"containerEdits":{{"hooks":[{{"hookName":"createContainer","path":"{hook}","args":["{arg0}","hook"]}}]}}}}"#
        )
        .into_bytes()
    }

    #[test]
    fn removes_only_our_spec_files_of_the_kind() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("nvidia.com-gpu.json");
        let taken = dir.path().join("nvidia.yaml");
        let foreign = dir.path().join("other.json");
        let other_kind = dir.path().join("mps.json");
        std::fs::write(&out, spec("nvidia.com/gpu", "/usr/bin/gpuhook")).unwrap();
        std::fs::write(&taken, spec("nvidia.com/gpu", "/usr/bin/gpuhook")).unwrap();
        std::fs::write(&foreign, spec("nvidia.com/gpu", "/usr/bin/nvidia-cdi-hook")).unwrap();
        std::fs::write(&other_kind, spec("nvidia.com/gpu-mps", "/usr/bin/gpuhook")).unwrap();
        let stale = remove_stale(&out, "nvidia.com/gpu", true);
        assert_eq!(
            stale,
            [Stale::Removed(out.clone()), Stale::Removed(taken.clone())]
        );
        assert!(foreign.exists() && other_kind.exists());
        let w = warning("MIG mode is on", &stale);
        assert!(w.contains("removed") && w.contains("nvidia.yaml"), "{w}");
    }

    #[test]
    fn a_foreign_file_at_the_output_is_kept_and_named() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("nvidia.yaml");
        std::fs::write(&out, spec("nvidia.com/gpu", "/usr/bin/nvidia-cdi-hook")).unwrap();
        let stale = remove_stale(&out, "nvidia.com/gpu", false);
        assert!(
            matches!(&stale[..], [Stale::Kept(p, _)] if p == &out),
            "{stale:?}"
        );
        assert!(out.exists());
        let w = warning("x", &stale);
        assert!(w.contains("left") && w.contains("nvidia-cdi-hook"), "{w}");
        assert!(warning("x", &[]).contains("no spec written"));
    }
}
