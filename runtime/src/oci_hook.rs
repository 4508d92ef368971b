//! The OCI hook file of podman's and CRI-O's hooks directories (`oci-hooks(5)`, schema 1.0.0)
//! that runs `gpuhook prestart` for containers: what NVIDIA's toolkit installs as
//! `oci-nvidia-hook.json` (`pkg/config/ocihook/oci-hook.go` `generateOciHook`), for GPU
//! containers without CDI (podman, CRI-O's hook mode).
//!
//! NVIDIA's hook: `version "1.0.0"`, `stages ["prestart"]`, `hook.path` the hook binary,
//! `hook.args [basename, "prestart"]`, `hook.env` only `PATH` (the standard dirs plus the hook's
//! own), `when {"always": true, "commands": [".*"]}`: the hook runs for every container and
//! decides itself (a container without `NVIDIA_VISIBLE_DEVICES`, CDI annotations or device
//! mounts is left untouched, before any discovery). Ours is the same with `gpuhook prestart`
//! (and `--config FILE` when given, since the hook gets no other environment).

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::configure::publish::{publish, read_bounded, refuse_symlinked_dir};
use crate::configure::{ConfigureError, FileChange};

/// podman's and CRI-O's default hooks directory (NVIDIA's `defaultHooksDir`).
pub const DEFAULT_HOOKS_DIR: &str = "/usr/share/containers/oci/hooks.d";
/// Our hook file's name in it (NVIDIA's is `oci-nvidia-hook.json`).
pub const DEFAULT_HOOK_FILE: &str = "oci-gpuhook.json";
/// NVIDIA's hook file: both in one directory would inject twice.
pub const NVIDIA_HOOK_FILE: &str = "oci-nvidia-hook.json";

/// The hook file's content for `gpuhook` at `binary` (absolute), with gpuhook's `config`.
pub fn hook_json(binary: &Path, config: Option<&Path>) -> String {
    let mut dirs = vec![
        "/usr/local/sbin",
        "/usr/local/bin",
        "/usr/sbin",
        "/usr/bin",
        "/sbin",
        "/bin",
    ];
    let own = binary.parent().and_then(Path::to_str).unwrap_or("/");
    if !dirs.contains(&own) {
        dirs.push(own);
    }
    let name = binary
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "gpuhook".into());
    let mut args = vec![name, "prestart".to_string()];
    if let Some(c) = config {
        args.extend(["--config".to_string(), c.to_string_lossy().into_owned()]);
    }
    let hook = json!({
        "version": "1.0.0",
        "hook": {
            "path": binary,
            "args": args,
            "env": [format!("PATH={}", dirs.join(":"))],
        },
        "when": {"always": true, "commands": [".*"]},
        "stages": ["prestart"],
    });
    let mut s = serde_json::to_string_pretty(&hook).unwrap_or_default();
    s.push('\n');
    s
}

/// Whether an existing hook file is ours to replace: one that runs `gpuhook prestart`.
fn is_ours(text: &str) -> bool {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(text) else {
        return false;
    };
    let args = &v["hook"]["args"];
    args[0].as_str().is_some_and(|a| a.ends_with("gpuhook")) && args[1] == "prestart"
}

/// What [`install`] did: the file change (none when already in place) and notes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookInstall {
    pub path: PathBuf,
    pub change: Option<FileChange>,
    pub notes: Vec<String>,
}

/// Writes (unless `dry_run`) `dir/file` for gpuhook at `binary`.
pub fn install(
    dir: &Path,
    file: &str,
    binary: &Path,
    config: Option<&Path>,
    dry_run: bool,
) -> Result<HookInstall, ConfigureError> {
    if !binary.is_absolute() || file.contains('/') || !file.ends_with(".json") {
        return Err(ConfigureError::InvalidOption {
            option: "hook",
            message: format!(
                "{} / {file:?}: give gpuhook's absolute path and a file name ending in .json",
                binary.display()
            ),
        });
    }
    refuse_symlinked_dir(dir)?;
    let path = dir.join(file);
    let before = read_bounded(&path)?;
    if before.as_deref().is_some_and(|t| !is_ours(t)) {
        return Err(ConfigureError::NotOurs { path });
    }
    let mut notes = Vec::new();
    if dir.join(NVIDIA_HOOK_FILE).exists() && file != NVIDIA_HOOK_FILE {
        notes.push(format!(
            "{} is NVIDIA's hook: with both, every GPU container is set up twice; remove it",
            dir.join(NVIDIA_HOOK_FILE).display()
        ));
    }
    let after = hook_json(binary, config);
    let mut change = (before.as_deref() != Some(after.as_str())).then(|| FileChange {
        path: path.clone(),
        before,
        after,
        backup: None,
    });
    if let (Some(c), false) = (&mut change, dry_run) {
        publish(std::slice::from_mut(c), |_| false)?;
    }
    Ok(HookInstall {
        path,
        change,
        notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hook_file_is_nvidias_with_gpuhook_prestart() {
        let text = hook_json(Path::new("/usr/bin/gpuhook"), None);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        // NVIDIA's configure_test.go "oci-hook: create hook file" and generateOciHook.
        assert_eq!(v["version"], "1.0.0");
        assert_eq!(v["stages"], json!(["prestart"]));
        assert_eq!(v["when"], json!({"always": true, "commands": [".*"]}));
        assert_eq!(v["hook"]["path"], "/usr/bin/gpuhook");
        assert_eq!(v["hook"]["args"], json!(["gpuhook", "prestart"]));
        assert_eq!(
            v["hook"]["env"],
            json!(["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"])
        );
        let v: serde_json::Value = serde_json::from_str(&hook_json(
            Path::new("/opt/gpu/bin/gpuhook"),
            Some(Path::new("/etc/gpu.toml")),
        ))
        .unwrap();
        assert_eq!(
            v["hook"]["args"],
            json!(["gpuhook", "prestart", "--config", "/etc/gpu.toml"])
        );
        assert!(v["hook"]["env"][0]
            .as_str()
            .unwrap()
            .ends_with(":/bin:/opt/gpu/bin"));
    }

    #[test]
    fn install_is_idempotent_and_never_replaces_another_hook() {
        let d = tempfile::tempdir().unwrap();
        let bin = Path::new("/usr/bin/gpuhook");
        let done = install(d.path(), DEFAULT_HOOK_FILE, bin, None, false).unwrap();
        assert!(done.change.is_some());
        let text = std::fs::read_to_string(d.path().join(DEFAULT_HOOK_FILE)).unwrap();
        assert_eq!(text, hook_json(bin, None));
        let again = install(d.path(), DEFAULT_HOOK_FILE, bin, None, false).unwrap();
        assert!(again.change.is_none());
        // NVIDIA's own file is never replaced, and its presence is pointed out.
        let nvidia = "{\"hook\": {\"args\": [\"nvidia-container-runtime-hook\", \"prestart\"]}}";
        std::fs::write(d.path().join(NVIDIA_HOOK_FILE), nvidia).unwrap();
        let err = install(d.path(), NVIDIA_HOOK_FILE, bin, None, false).unwrap_err();
        assert!(matches!(err, ConfigureError::NotOurs { .. }), "{err}");
        assert_eq!(
            std::fs::read_to_string(d.path().join(NVIDIA_HOOK_FILE)).unwrap(),
            nvidia
        );
        let noted = install(d.path(), DEFAULT_HOOK_FILE, bin, None, true).unwrap();
        assert!(noted.notes[0].contains("set up twice"), "{noted:?}");
        assert!(install(d.path(), "x.txt", bin, None, true).is_err());
        assert!(install(d.path(), "x.json", Path::new("gpuhook"), None, true).is_err());
    }
}
