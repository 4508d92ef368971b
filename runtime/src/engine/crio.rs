//! CRI-O: the gpuhook runtime handler, in a drop-in of `/etc/crio/crio.conf.d/` (the default, as
//! nvidia-ctk's `99-nvidia.toml`) or in `crio.conf` itself.
//!
//! The table is CRI-O's `[crio.runtime.runtimes.<name>]` (crio.conf(5), "CRIO.RUNTIME.RUNTIMES
//! TABLE"): `runtime_path` (our wrapper), `runtime_type = "oci"`, and, as nvidia-ctk does
//! (`pkg/config/engine/crio/crio.go` `AddRuntime`), every other setting of the node's low-level
//! runtime: the default runtime unless it is ours or NVIDIA's, else `runc`, else `crun` — so
//! `monitor_path` (conmon), `runtime_root`, `monitor_cgroup`… match what CRI-O runs today.
//! Unlike nvidia-ctk, that runtime is looked up in the main file *and* the other drop-ins (CRI-O
//! applies them in name order, crio.conf.d(5)), and the keys that would replace our binary
//! (`inherit_default_runtime`, `platform_runtime_paths`, `runtime_config_path`, VM runtimes only)
//! are not copied. `--set-as-default` sets `[crio.runtime] default_runtime`. CRI-O enables CDI by
//! itself (1.23+), so `--cdi.enabled` writes nothing, as with nvidia-ctk.
//!
//! The drop-in is only ever ours (first line [`DROP_IN_MARKER`]); a drop-in directory that is a
//! symlink is refused.

use std::path::{Path, PathBuf};

use toml_edit::{value, DocumentMut, Item, Table};

use crate::configure::edit::{child, fresh_copy, set_if_different};
use crate::configure::publish::{read_bounded, refuse_symlinked_dir};
use crate::configure::{ConfigureError, FileChange, DROP_IN_MARKER};
use crate::engine::EngineOptions;

/// Keys of the copied runtime that would point CRI-O at another binary than ours.
const NOT_COPIED: &[&str] = &[
    "runtime_path",
    "runtime_type",
    "inherit_default_runtime",
    "platform_runtime_paths",
    "runtime_config_path",
];

/// Most files read from the drop-in directory.
const MAX_DROP_INS: usize = 256;

/// The changes and notes.
pub fn plan(opts: &EngineOptions) -> Result<(Vec<FileChange>, Vec<String>), ConfigureError> {
    let mut notes = Vec::new();
    if opts.enable_cdi {
        notes.push(
            "CRI-O enables CDI by itself (1.23 and later): --cdi.enabled writes nothing".into(),
        );
    }
    let main_before = read_bounded(&opts.config)?;
    let main = parse(&opts.config, main_before.as_deref().unwrap_or(""))?;
    let mut sources = vec![main.clone()];
    if let Some(drop_in) = &opts.drop_in {
        sources.extend(other_drop_ins(drop_in)?);
    }
    let source = low_level_runtime(&sources, &opts.runtime_name);
    match &source {
        Some((name, _)) => notes.push(format!("settings copied from CRI-O's runtime `{name}`")),
        None => notes.push(
            "no runc, crun or default runtime table found: CRI-O's defaults apply (conmon from \
             $PATH)"
                .into(),
        ),
    }
    let table = runtime_table(source.map(|(_, t)| t), opts);
    let change = match &opts.drop_in {
        Some(d) => drop_in_change(opts, d, table)?,
        None => in_place_change(opts, main, main_before, table)?,
    };
    Ok((change.into_iter().collect(), notes))
}

fn parse(path: &Path, text: &str) -> Result<DocumentMut, ConfigureError> {
    text.parse::<DocumentMut>()
        .map_err(|e| ConfigureError::Parse {
            path: path.into(),
            message: e.to_string(),
        })
}

/// The other files of the drop-in's directory, parsed, in CRI-O's order (by name).
fn other_drop_ins(drop_in: &Path) -> Result<Vec<DocumentMut>, ConfigureError> {
    let Some(dir) = drop_in.parent() else {
        return Ok(Vec::new());
    };
    refuse_symlinked_dir(dir)?;
    let mut files: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .map(|e| e.path())
            .filter(|p| p != drop_in)
            .take(MAX_DROP_INS)
            .collect(),
        Err(_) => Vec::new(),
    };
    files.sort();
    files
        .iter()
        .map(|f| parse(f, read_bounded(f)?.as_deref().unwrap_or("")))
        .collect()
}

/// `crio.runtime` of `doc`, if it is a table.
fn runtime_section(doc: &DocumentMut) -> Option<&dyn toml_edit::TableLike> {
    doc.get("crio")?
        .as_table_like()?
        .get("runtime")?
        .as_table_like()
}

/// The runtime nvidia-ctk copies (`engine.GetLowLevelRuntimes`: the default runtime unless it
/// is an `nvidia*` one — or ours —, then `runc`, then `crun`), the last file defining it winning.
fn low_level_runtime(docs: &[DocumentMut], ours: &str) -> Option<(String, Table)> {
    let default = docs
        .iter()
        .rev()
        .find_map(|d| runtime_section(d)?.get("default_runtime")?.as_str())
        .filter(|d| *d != ours && !d.starts_with("nvidia"));
    let candidates = default.into_iter().chain(["runc", "crun"]);
    candidates.into_iter().find_map(|name| {
        docs.iter().rev().find_map(|d| {
            let t = runtime_section(d)?.get("runtimes")?.as_table_like()?;
            let r = t.get(name)?.as_table_like()?;
            Some((name.to_string(), fresh_copy(r)))
        })
    })
}

/// Our runtime table: path and type first, then the copied settings.
fn runtime_table(source: Option<Table>, opts: &EngineOptions) -> Table {
    let mut t = Table::new();
    t.insert(
        "runtime_path",
        value(opts.binary.to_string_lossy().as_ref()),
    );
    t.insert("runtime_type", value("oci"));
    for (k, item) in source.iter().flat_map(|s| s.iter()) {
        if !NOT_COPIED.contains(&k) {
            t.insert(k, item.clone());
        }
    }
    t
}

/// `crio.runtime` of `doc`, created (implicit) when missing.
fn runtime_of<'a>(doc: &'a mut DocumentMut, file: &Path) -> Result<&'a mut Table, ConfigureError> {
    let crio = child(doc.as_table_mut(), "crio", "", file)?;
    child(crio, "runtime", "crio", file)
}

fn drop_in_change(
    opts: &EngineOptions,
    path: &Path,
    table: Table,
) -> Result<Option<FileChange>, ConfigureError> {
    if let Some(dir) = path.parent() {
        refuse_symlinked_dir(dir)?;
    }
    let before = read_bounded(path)?;
    if before
        .as_deref()
        .is_some_and(|s| !s.starts_with(DROP_IN_MARKER))
    {
        return Err(ConfigureError::NotOurs { path: path.into() });
    }
    let mut doc = DocumentMut::new();
    let runtime = runtime_of(&mut doc, path)?;
    if opts.set_as_default {
        runtime.set_implicit(false);
        runtime.insert("default_runtime", value(opts.runtime_name.as_str()));
    }
    let runtimes = child(runtime, "runtimes", "crio.runtime", path)?;
    runtimes.insert(&opts.runtime_name, Item::Table(table));
    let after = format!(
        "{DROP_IN_MARKER} --runtime crio: gpuhook's CRI-O runtime handler\n\
         # (crio.conf.d(5)); select it with a RuntimeClass whose handler is `{}`.\n\n{doc}",
        opts.runtime_name
    );
    Ok(change(path, before, after))
}

fn in_place_change(
    opts: &EngineOptions,
    mut doc: DocumentMut,
    before: Option<String>,
    table: Table,
) -> Result<Option<FileChange>, ConfigureError> {
    let path = &opts.config;
    let runtime = runtime_of(&mut doc, path)?;
    let name = opts.runtime_name.as_str();
    if opts.set_as_default {
        set_if_different(runtime, "default_runtime", name);
    } else if runtime.get("default_runtime").and_then(Item::as_str) == Some(name) {
        // nvidia-ctk's AddRuntime: not the default any more unless asked.
        runtime.remove("default_runtime");
    }
    let runtimes = child(runtime, "runtimes", "crio.runtime", path)?;
    match runtimes.get_mut(name).and_then(Item::as_table_mut) {
        Some(existing) => {
            set_if_different(
                existing,
                "runtime_path",
                opts.binary.to_string_lossy().as_ref(),
            );
            set_if_different(existing, "runtime_type", "oci");
        }
        None => {
            runtimes.insert(name, Item::Table(table));
        }
    }
    Ok(change(path, before, doc.to_string()))
}

fn change(path: &Path, before: Option<String>, after: String) -> Option<FileChange> {
    (before.as_deref() != Some(after.as_str())).then(|| FileChange {
        path: path.into(),
        before,
        after,
        backup: None,
    })
}

#[cfg(test)]
#[path = "crio_tests.rs"]
mod tests;
