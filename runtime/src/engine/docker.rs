//! Docker: the gpuhook runtime in `/etc/docker/daemon.json`.
//!
//! What nvidia-ctk writes (`pkg/config/engine/docker/docker.go`): `runtimes.<name> = {"args": [],
//! "path": <binary>}`, `default-runtime = <name>` with `--set-as-default`, `features.cdi = true`
//! with `--cdi.enabled` (Docker 25+). Unlike nvidia-ctk (a Go map: keys re-sorted, other
//! `features` dropped because of a type assertion on `map[string]bool`), every other key, value
//! and its place in the file is kept, and the file's indentation too. A runtime of that name
//! with the same path is left as it is (its `runtimeArgs` included). Docker has no drop-in
//! directory: `--drop-in` is refused. `docker run --gpus` needs none of this (only the
//! `nvidia-container-runtime-hook` link on dockerd's PATH); this is for `--runtime NAME`.

use std::path::Path;

use crate::configure::publish::read_bounded;
use crate::configure::{ConfigureError, FileChange};
use crate::engine::EngineOptions;
use crate::json_order::{self, Json};

/// The name dockerd looks up on its `PATH` and runs for `docker run --gpus` (moby
/// `daemon/nvidia_linux.go`): `gpuhook` answers to it (a link of that name).
pub const NVIDIA_HOOK_NAME: &str = "nvidia-container-runtime-hook";

/// The changes (at most `daemon.json`) and notes.
pub fn plan(opts: &EngineOptions) -> Result<(Vec<FileChange>, Vec<String>), ConfigureError> {
    if let Some(d) = &opts.drop_in {
        return Err(ConfigureError::Unsupported {
            engine: "docker",
            what: "drop-in configs",
            message: format!(
                "{} cannot be used: dockerd reads only {} (run without --drop-in)",
                d.display(),
                opts.config.display()
            ),
        });
    }
    let path = &opts.config;
    let before = read_bounded(path)?;
    let mut notes = Vec::new();
    let text = before.as_deref().unwrap_or("{}");
    let mut doc = parse(path, text)?;
    let old = doc.clone();
    edit(&mut doc, opts, path)?;
    if before.is_none() {
        notes.push(format!("{} does not exist: creating it", path.display()));
    }
    if opts.enable_cdi {
        notes.push(
            "features.cdi makes `docker run --device nvidia.com/gpu=0` use CDI specs: Docker 25 \
             and later"
                .into(),
        );
    }
    if doc == old {
        return Ok((Vec::new(), notes));
    }
    let after = doc.to_pretty(&json_order::detect_indent(text));
    let change = FileChange {
        path: path.clone(),
        before,
        after,
        backup: None,
    };
    Ok((vec![change], notes))
}

fn parse(path: &Path, text: &str) -> Result<Json, ConfigureError> {
    let doc = json_order::parse(text).map_err(|message| ConfigureError::ParseJson {
        path: path.into(),
        message,
    })?;
    match doc {
        Json::Object(_) => Ok(doc),
        _ => Err(ConfigureError::WrongType {
            path: path.into(),
            key: "(the top level)".into(),
            expected: "a JSON object",
        }),
    }
}

/// The object at `key` of `entries`, created empty when absent.
fn object_at<'a>(
    entries: &'a mut Vec<(String, Json)>,
    key: &str,
    path: &Path,
) -> Result<&'a mut Vec<(String, Json)>, ConfigureError> {
    if !entries.iter().any(|(k, _)| k == key) {
        entries.push((key.to_string(), Json::Object(Vec::new())));
    }
    entries
        .iter_mut()
        .find(|(k, _)| k == key)
        .and_then(|(_, v)| v.as_object_mut())
        .ok_or_else(|| ConfigureError::WrongType {
            path: path.into(),
            key: key.to_string(),
            expected: "a JSON object",
        })
}

/// The runtime entry, default runtime and CDI feature, in `doc` (an object).
fn edit(doc: &mut Json, opts: &EngineOptions, path: &Path) -> Result<(), ConfigureError> {
    let Some(top) = doc.as_object_mut() else {
        return Ok(());
    };
    let binary = opts.binary.to_string_lossy().into_owned();
    let runtimes = object_at(top, "runtimes", path)?;
    let same_path = runtimes
        .iter()
        .find(|(k, _)| *k == opts.runtime_name)
        .and_then(|(_, v)| v.get("path"))
        .and_then(Json::as_str)
        == Some(binary.as_str());
    if !same_path {
        let entry = Json::Object(vec![
            ("args".into(), Json::Array(Vec::new())),
            ("path".into(), Json::String(binary)),
        ]);
        json_order::set(runtimes, &opts.runtime_name, entry);
    }
    if opts.set_as_default {
        let name = Json::String(opts.runtime_name.clone());
        json_order::set(top, "default-runtime", name);
    }
    if opts.enable_cdi {
        let features = object_at(top, "features", path)?;
        json_order::set(features, "cdi", Json::Bool(true));
    }
    Ok(())
}

#[cfg(test)]
#[path = "docker_tests.rs"]
mod tests;
