//! `configure --drop-in`: gpuhook's runtime in a file of its own that the main config imports.
//!
//! The drop-in is only ever gpuhook's (its first line is [`DROP_IN_MARKER`]; anything else at
//! that path is refused), and its content depends on the config version: containerd before 2.0
//! replaces a whole plugin section with an imported one, so a version-2 drop-in carries a copy of
//! the main file's CRI section; containerd 2.x merges key by key, so a version-3 one holds only
//! our tables.

use std::path::Path;

use toml_edit::{DocumentMut, Table};

use super::{
    add_runtime, change, edit, existing_cri, read_optional, ConfigVersion, ConfigureError,
    ConfigureOptions, FileChange, DROP_IN_MARKER,
};

/// The changes with `--drop-in`: the drop-in (ours only) and the main config's import of it.
pub(super) fn plan(
    opts: &ConfigureOptions,
    drop_in: &Path,
    mut main: DocumentMut,
    main_before: Option<String>,
    version: ConfigVersion,
    notes: &mut Vec<String>,
) -> Result<Vec<FileChange>, ConfigureError> {
    if version == ConfigVersion::V1 {
        return Err(ConfigureError::DropInNeedsV2 {
            path: opts.config.clone(),
        });
    }
    let drop_before = read_optional(drop_in)?;
    if drop_before
        .as_deref()
        .is_some_and(|s| !s.starts_with(DROP_IN_MARKER))
    {
        return Err(ConfigureError::NotOurs {
            path: drop_in.to_path_buf(),
        });
    }
    let base = opts.config.parent().unwrap_or(Path::new("/"));
    if edit::ensure_import(&mut main, drop_in, base, &opts.config)? {
        notes.push(format!(
            "added {} to the imports of {}",
            drop_in.display(),
            opts.config.display()
        ));
    }
    let source = existing_cri(&main, version).unwrap_or_default();
    let mut doc = DocumentMut::new();
    doc.insert("version", toml_edit::value(version.number()));
    let header = drop_in_header(&mut doc, &source, version, &opts.config, drop_in)?;
    add_runtime(&mut doc, &source, version, opts, drop_in, notes)?;
    let mut changes: Vec<FileChange> = Vec::new();
    // The drop-in first: the import must never point at a missing file.
    changes.extend(change(drop_in, drop_before, format!("{header}{doc}")));
    changes.extend(change(&opts.config, main_before, main.to_string()));
    Ok(changes)
}

/// The drop-in's comment header; for version 2 also the copy of the main CRI section it carries.
fn drop_in_header(
    doc: &mut DocumentMut,
    source: &Table,
    version: ConfigVersion,
    config: &Path,
    drop_in: &Path,
) -> Result<String, ConfigureError> {
    if version == ConfigVersion::V3 {
        return Ok(format!(
            "{DROP_IN_MARKER} from {}.\n# Re-run it instead of editing this file.\n\n",
            config.display()
        ));
    }
    // containerd < 2.0 replaces the whole CRI section with an imported one: carry all of it.
    let cri = edit::cri_table(doc, version, drop_in)?;
    *cri = source.clone();
    cri.set_implicit(false);
    Ok(format!(
        "{DROP_IN_MARKER} from {main}.\n# containerd before 2.0 replaces a whole plugin section with the one of an imported\n# file, so this file carries a copy of the CRI plugin section of {main} plus the\n# gpuhook runtime. Edit {main} and re-run `gpuhook runtime configure --drop-in`\n# instead of editing this file.\n\n",
        main = config.display()
    ))
}

#[cfg(test)]
#[path = "drop_in_tests.rs"]
mod tests;
