//! The `nvidia-container-runtime-hook` entry that makes `docker run --gpus` use gpuhook.
//!
//! Docker's `--gpus` makes dockerd add a prestart hook `nvidia-container-runtime-hook prestart`
//! that it finds **by name on its own `PATH`** (moby `daemon/nvidia_linux.go`, `exec.LookPath`):
//! dockerd does not read the toolkit's config for it. NVIDIA's toolkit container installs into
//! `/usr/local/nvidia/toolkit`, which is on no `PATH`; it serves Docker through the `nvidia`
//! runtime it adds to `daemon.json` (that runtime inserts its hook by absolute path), so plain
//! `--gpus` there still needs the packaged `/usr/bin/nvidia-container-runtime-hook`. gpuhook
//! puts a link to the installed `gpuhook` (which acts as `gpuhook prestart` under that name) in
//! a directory of dockerd's `PATH`: `/usr/local/bin` by default, the admin's own directory,
//! first of systemd's default `PATH` after `/usr/local/sbin`, and never a package manager's
//! (`/usr/bin`, where NVIDIA's .deb puts its file).
//!
//! NVIDIA's own hook is never replaced, nor shadowed (a link in `/usr/local/bin` would win over
//! `/usr/bin` on `PATH`), without `--force`: without it the link is left out with a warning.
//! With `--force`, an existing entry at the link's path is kept as a hard link
//! (`.nvidia-container-runtime-hook.gpuhook-saved`, same directory: same inode, so the same
//! bytes, mode, owner) and renamed back by `uninstall`.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};

/// The name dockerd looks up for `--gpus`.
pub const HOOK_NAME: &str = "nvidia-container-runtime-hook";

/// Where the link goes by default.
pub const DEFAULT_HOOK_DIR: &str = "/usr/local/bin";

/// systemd's default `PATH` (dockerd's unit sets none): where dockerd finds the hook.
pub const DOCKERD_PATH: [&str; 6] = [
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
];

/// Name of the saved previous entry, beside the link.
const SAVED_NAME: &str = ".nvidia-container-runtime-hook.gpuhook-saved";

/// A link the install made (host paths).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Link {
    pub path: PathBuf,
    pub target: PathBuf,
    /// The entry that was at `path` before (a hard link to it), put back by `uninstall`.
    #[serde(default)]
    pub saved: Option<PathBuf>,
}

/// What [`install`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Made(Link),
    /// The link was already there, pointing at `target`.
    AlreadyThere,
    /// Another `nvidia-container-runtime-hook` is in the way; the message says which.
    Skipped(String),
}

/// Puts `dir/nvidia-container-runtime-hook -> target` (see the module docs); `path_dirs` are
/// the other directories of dockerd's `PATH`, searched for a hook it would shadow.
pub fn install(
    dir: &Path,
    target: &Path,
    force: bool,
    path_dirs: &[PathBuf],
) -> anyhow::Result<Outcome> {
    let path = dir.join(HOOK_NAME);
    if fs::read_link(&path).is_ok_and(|t| t == target) {
        return Ok(Outcome::AlreadyThere);
    }
    let existing = fs::symlink_metadata(&path).is_ok();
    let shadowed = path_dirs
        .iter()
        .map(|d| d.join(HOOK_NAME))
        .find(|p| *p != path && fs::symlink_metadata(p).is_ok());
    let in_the_way = if existing {
        Some(&path)
    } else {
        shadowed.as_ref()
    };
    if let (Some(other), false) = (in_the_way, force) {
        return Ok(Outcome::Skipped(format!(
            "{} exists (NVIDIA's hook?) and is not gpuhook's: not {} it, so `docker run --gpus` \
             keeps using it; pass --force to put gpuhook's link at {} (uninstall restores what \
             was there), or --no-docker-hook to silence this",
            other.display(),
            if existing { "replacing" } else { "shadowing" },
            path.display()
        )));
    }
    let saved = if existing {
        let saved = dir.join(SAVED_NAME);
        fs::hard_link(&path, &saved).with_context(|| {
            format!(
                "cannot keep {} as {} (remove a stale {} first)",
                path.display(),
                saved.display(),
                saved.display()
            )
        })?;
        Some(saved)
    } else {
        None
    };
    let temp = dir.join(format!(".{HOOK_NAME}.gpuhook-new"));
    let _ = fs::remove_file(&temp);
    std::os::unix::fs::symlink(target, &temp)
        .and_then(|()| fs::rename(&temp, &path))
        .with_context(|| format!("cannot create {}", path.display()))?;
    tracing::info!(path = %path.display(), target = %target.display(), "linked");
    Ok(Outcome::Made(Link {
        path,
        target: target.to_path_buf(),
        saved,
    }))
}

/// Takes a link away again: the saved entry renamed back over it, or the link removed. A link
/// that is no longer ours (replaced since, e.g. by a package upgrade) is left alone. Running it
/// twice does nothing the second time.
pub fn undo(link: &Link) -> anyhow::Result<()> {
    let ours = fs::read_link(&link.path).is_ok_and(|t| t == link.target);
    let gone =
        matches!(fs::symlink_metadata(&link.path), Err(e) if e.kind() == io::ErrorKind::NotFound);
    let saved = link
        .saved
        .as_ref()
        .filter(|s| fs::symlink_metadata(s).is_ok());
    match (ours || gone, saved) {
        (true, Some(saved)) => {
            fs::rename(saved, &link.path)
                .with_context(|| format!("cannot put {} back", link.path.display()))?;
            tracing::info!(path = %link.path.display(), "restored");
        }
        (true, None) if ours => {
            fs::remove_file(&link.path)
                .with_context(|| format!("cannot remove {}", link.path.display()))?;
            tracing::info!(path = %link.path.display(), "removed");
        }
        // Gone with nothing to put back, or put back by an earlier (interrupted) uninstall.
        (true, None) => {}
        (false, None) if link.saved.is_some() => {}
        (false, saved) => tracing::warn!(
            path = %link.path.display(),
            saved = ?saved,
            "not gpuhook's link any more: left alone (and the saved entry, if any, kept)"
        ),
    }
    Ok(())
}

#[cfg(test)]
#[path = "link_tests.rs"]
mod tests;
