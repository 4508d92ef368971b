//! The TOML edits of `configure`, on `toml_edit` documents so comments and layout survive.
//!
//! Every setter writes only when the value differs: rewriting an equal value would still change
//! its formatting, and a second run must leave the file byte-identical.

use toml_edit::{Array, DocumentMut, Item, Table, Value};

use super::{ConfigVersion, ConfigureError, ConfigureOptions};

/// containerd's runc shim, the only runtime type the wrapper works with.
pub const RUNC_V2: &str = "io.containerd.runc.v2";
/// CDI annotations passed to the runtime: how a device plugin's CDI requests reach the wrapper on
/// containerd 1.6. Passed from *container* annotations (what kubelet sets from a device plugin's
/// Allocate response) by default; from pod annotations (the pod author's) only on request.
pub const CDI_ANNOTATIONS: &str = "cdi.k8s.io/*";

/// The config version of a parsed file (`version` missing = 1).
pub fn version(doc: &DocumentMut, file: &std::path::Path) -> Result<ConfigVersion, ConfigureError> {
    let unknown = |found: String| ConfigureError::UnknownVersion {
        path: file.into(),
        found,
    };
    match doc.get("version") {
        None => Ok(ConfigVersion::V1),
        Some(item) => match item.as_integer() {
            Some(1) => Ok(ConfigVersion::V1),
            Some(2) => Ok(ConfigVersion::V2),
            Some(3) => Ok(ConfigVersion::V3),
            _ => Err(unknown(item.to_string().trim().to_string())),
        },
    }
}

/// The child table `key` of `parent`, created (implicit, so no empty header is printed) when
/// missing; an inline table is turned into a standard one.
pub fn child<'a>(
    parent: &'a mut Table,
    key: &str,
    what: &str,
    file: &std::path::Path,
) -> Result<&'a mut Table, ConfigureError> {
    let item = parent.entry(key).or_insert_with(|| {
        let mut t = Table::new();
        t.set_implicit(true);
        Item::Table(t)
    });
    if let Item::Value(Value::InlineTable(inline)) = item {
        let t = std::mem::take(inline).into_table();
        *item = Item::Table(t);
    }
    item.as_table_mut()
        .ok_or_else(|| ConfigureError::WrongType {
            path: file.into(),
            key: format!("{what}.{key}").trim_start_matches('.').to_string(),
            expected: "a table",
        })
}

/// The CRI plugin table (created if missing).
pub fn cri_table<'a>(
    doc: &'a mut DocumentMut,
    version: ConfigVersion,
    file: &std::path::Path,
) -> Result<&'a mut Table, ConfigureError> {
    let plugins = child(doc.as_table_mut(), "plugins", "", file)?;
    child(plugins, version.cri_plugin(), "plugins", file)
}

/// A copy of `t` without comments or layout (a fresh table written in the default style).
pub fn fresh_copy(t: &dyn toml_edit::TableLike) -> Table {
    let mut out = Table::new();
    for (k, item) in t.iter() {
        match item {
            Item::Value(Value::InlineTable(inner)) => {
                out.insert(k, Item::Table(fresh_copy(inner)));
            }
            Item::Value(v) => {
                let mut v = v.clone();
                v.decor_mut().clear();
                out.insert(k, Item::Value(v));
            }
            Item::Table(inner) => {
                out.insert(k, Item::Table(fresh_copy(inner)));
            }
            Item::ArrayOfTables(a) => {
                out.insert(k, Item::ArrayOfTables(a.clone()));
            }
            Item::None => {}
        }
    }
    out
}

fn get_str<'a>(t: &'a dyn toml_edit::TableLike, key: &str) -> Option<&'a str> {
    t.get(key).and_then(Item::as_str)
}

/// Sets `key` to `value` unless it already has that value; returns whether it changed.
pub fn set_if_different(t: &mut Table, key: &str, value: impl Into<Value>) -> bool {
    let value: Value = value.into();
    let same = t
        .get(key)
        .and_then(Item::as_value)
        .is_some_and(|old| match (old, &value) {
            (Value::String(a), Value::String(b)) => a.value() == b.value(),
            (Value::Boolean(a), Value::Boolean(b)) => a.value() == b.value(),
            (Value::Integer(a), Value::Integer(b)) => a.value() == b.value(),
            _ => false,
        });
    if !same {
        t.insert(key, Item::Value(value));
    }
    !same
}

/// The runtime whose options the new runtime copies: `runc`, else the default runtime when it
/// is a runc-shim runtime other than ours.
fn source_runtime(cri: &Table, name: &str) -> Option<(String, Table)> {
    let containerd = cri.get("containerd")?.as_table_like()?;
    let runtimes = containerd.get("runtimes")?.as_table_like()?;
    let default = get_str(containerd, "default_runtime_name").unwrap_or("runc");
    for cand in ["runc", default] {
        if cand == name {
            continue;
        }
        if let Some(rt) = runtimes.get(cand).and_then(Item::as_table_like) {
            let shim = get_str(rt, "runtime_type").unwrap_or(RUNC_V2);
            if cand == "runc" || shim == RUNC_V2 {
                return Some((cand.to_string(), fresh_copy(rt)));
            }
        }
    }
    None
}

/// Adds or updates the runtime in `target` (a CRI plugin table), copying options from the runc
/// runtime of `source` (the same table, or the main file's for a drop-in). Returns notes for
/// the user about what was done.
pub fn ensure_runtime(
    target: &mut Table,
    source: &Table,
    opts: &ConfigureOptions,
    file: &std::path::Path,
) -> Result<(Vec<String>, Option<String>), ConfigureError> {
    let mut notes = Vec::new();
    let name = opts.runtime_name.as_str();
    let src = source_runtime(source, name);
    if opts.enable_cdi && set_if_different(target, "enable_cdi", true) {
        notes.push("set enable_cdi = true".into());
    }
    let containerd = child(target, "containerd", "CRI plugin", file)?;
    let default = get_str(containerd, "default_runtime_name")
        .unwrap_or("runc")
        .to_string();
    if opts.set_as_default && set_if_different(containerd, "default_runtime_name", name) {
        notes.push(format!("set default_runtime_name = \"{name}\""));
    }
    let runtimes = child(containerd, "runtimes", "containerd", file)?;
    // containerd replaces its built-in runtime table with the file's: once the file names a
    // runtime, runc must be named too or the default runtime disappears.
    if default == "runc" && name != "runc" && !runtimes.contains_key("runc") {
        let mut runc = Table::new();
        runc.insert("runtime_type", toml_edit::value(RUNC_V2));
        runtimes.insert("runc", Item::Table(runc));
        notes.push("added the runc runtime containerd uses by default (naming any runtime replaces the built-in list)".into());
    }
    let existed = runtimes.contains_key(name);
    if !existed {
        let mut fresh = src.as_ref().map(|(_, t)| t.clone()).unwrap_or_default();
        fresh.set_implicit(false);
        runtimes.insert(name, Item::Table(fresh));
        notes.push(match &src {
            Some((from, _)) => {
                format!("added runtime {name} (settings copied from runtime {from})")
            }
            None => format!("added runtime {name}"),
        });
    }
    let rt = child(runtimes, name, "runtimes", file)?;
    let changed = update_settings(rt, src.as_ref().map(|(_, t)| t), opts, file, &mut notes)?;
    if existed && !changed.is_empty() {
        notes.push(format!("updated runtime {name}: {}", changed.join(", ")));
    }
    let copied_from = if existed {
        None
    } else {
        src.map(|(from, _)| from)
    };
    Ok((notes, copied_from))
}

/// Sets what gpuhook needs in runtime table `rt` (type, annotations, host devices, BinaryName)
/// and copies `SystemdCgroup` from the source runtime `src`. Returns the keys it changed.
fn update_settings(
    rt: &mut Table,
    src: Option<&Table>,
    opts: &ConfigureOptions,
    file: &std::path::Path,
    notes: &mut Vec<String>,
) -> Result<Vec<&'static str>, ConfigureError> {
    let name = opts.runtime_name.as_str();
    let binary = opts.binary.to_string_lossy().into_owned();
    let mut changed = Vec::new();
    if set_if_different(rt, "runtime_type", RUNC_V2) {
        changed.push("runtime_type");
    }
    let hide_host_devices = !opts.privileged_host_devices;
    if set_if_different(rt, "privileged_without_host_devices", hide_host_devices) {
        changed.push("privileged_without_host_devices");
    }
    if add_to_array(rt, "container_annotations", CDI_ANNOTATIONS) {
        changed.push("container_annotations");
    }
    // A pod annotation is not a device grant: passed through only when the admin asks.
    let pod = if opts.pod_cdi_annotations {
        add_to_array(rt, "pod_annotations", CDI_ANNOTATIONS)
    } else {
        remove_from_array(rt, "pod_annotations", CDI_ANNOTATIONS)
    };
    if pod {
        changed.push("pod_annotations");
    }
    let src_options = src
        .and_then(|t| t.get("options"))
        .and_then(Item::as_table_like)
        .map(fresh_copy);
    let options = child(rt, "options", name, file)?;
    options.set_implicit(false);
    if set_if_different(options, "BinaryName", binary.as_str()) {
        changed.push("options.BinaryName");
    }
    if let Some(src_opts) = &src_options {
        if let Some(v) = src_opts.get("SystemdCgroup").and_then(Item::as_bool) {
            if set_if_different(options, "SystemdCgroup", v) {
                changed.push("options.SystemdCgroup");
            }
        }
        if let Some(runc_bin) = get_str(src_opts, "BinaryName").filter(|b| !b.is_empty()) {
            notes.push(format!(
                "the source runtime runs {runc_bin}: list it in /etc/gpuhook/config.toml \
                 ([runtime] runtimes = [\"{runc_bin}\"]) so gpuhook-runtime execs it"
            ));
        }
    }
    Ok(changed)
}

/// Go `filepath.Match`-style matching (shared with the pod-annotation allow-list).
pub use gpuhook_request::glob_match;

/// Adds `value` to the string array `key` of `table` (created when missing); whether it changed.
fn add_to_array(table: &mut Table, key: &str, value: &str) -> bool {
    match table.get_mut(key).and_then(Item::as_array_mut) {
        Some(a) if a.iter().any(|v| v.as_str() == Some(value)) => false,
        Some(a) => {
            a.push(value);
            true
        }
        None => {
            let mut a = Array::new();
            a.push(value);
            table.insert(key, toml_edit::value(a));
            true
        }
    }
}

/// Removes `value` from the string array `key` of `table` (and the key once empty).
fn remove_from_array(table: &mut Table, key: &str, value: &str) -> bool {
    let Some(a) = table.get_mut(key).and_then(Item::as_array_mut) else {
        return false;
    };
    let before = a.len();
    a.retain(|v| v.as_str() != Some(value));
    let changed = a.len() != before;
    if a.is_empty() {
        table.remove(key);
    }
    changed
}

/// Adds `entry` to the document's top-level `imports` unless an entry (path or glob, relative
/// ones taken from `base_dir`) already covers it. Returns whether it was added.
pub fn ensure_import(
    doc: &mut DocumentMut,
    entry: &std::path::Path,
    base_dir: &std::path::Path,
    file: &std::path::Path,
) -> Result<bool, ConfigureError> {
    let entry_s = entry.to_string_lossy().into_owned();
    let covers = |pattern: &str| {
        let abs = if pattern.starts_with('/') {
            pattern.to_string()
        } else {
            base_dir.join(pattern).to_string_lossy().into_owned()
        };
        glob_match(&abs, &entry_s)
    };
    match doc.get_mut("imports") {
        None => {
            let mut a = Array::new();
            a.push(entry_s.as_str());
            // Top-level keys must precede the first table; insert_formatted keeps that.
            doc.insert("imports", toml_edit::value(a));
            Ok(true)
        }
        Some(item) => {
            let arr = item
                .as_array_mut()
                .ok_or_else(|| ConfigureError::WrongType {
                    path: file.into(),
                    key: "imports".into(),
                    expected: "an array of file names",
                })?;
            if arr.iter().filter_map(Value::as_str).any(covers) {
                return Ok(false);
            }
            arr.push(entry_s.as_str());
            Ok(true)
        }
    }
}

fn tables_mut(t: &mut Table, f: &mut dyn FnMut(&mut Table)) {
    f(t);
    for (_, item) in t.iter_mut() {
        if let Item::Table(inner) = item {
            tables_mut(inner, f);
        }
    }
}

fn max_position(t: &mut Table) -> Option<usize> {
    let mut max = None;
    tables_mut(t, &mut |t| max = max.max(t.position()));
    max
}

/// Moves the newly added runtime `name` (and its options) right after runtime `after` in the
/// printed file, instead of at its end, shifting the tables that follow.
pub fn place_after(doc: &mut DocumentMut, cri: &str, name: &str, after: &str) {
    let path = ["plugins", cri, "containerd", "runtimes"];
    let mut runtimes = doc.as_table_mut();
    for key in path {
        match runtimes.get_mut(key).and_then(Item::as_table_mut) {
            Some(t) => runtimes = t,
            None => return,
        }
    }
    let Some(anchor) = runtimes
        .get_mut(after)
        .and_then(Item::as_table_mut)
        .and_then(max_position)
    else {
        return;
    };
    let Some(new) = runtimes.get_mut(name).and_then(Item::as_table_mut) else {
        return;
    };
    let mut count = 0;
    tables_mut(new, &mut |_| count += 1);
    tables_mut(doc.as_table_mut(), &mut |t| {
        if let Some(p) = t.position().filter(|p| *p > anchor) {
            t.set_position(p + count);
        }
    });
    let mut runtimes = doc.as_table_mut();
    for key in path {
        match runtimes.get_mut(key).and_then(Item::as_table_mut) {
            Some(t) => runtimes = t,
            None => return,
        }
    }
    if let Some(new) = runtimes.get_mut(name).and_then(Item::as_table_mut) {
        let mut next = anchor + 1;
        tables_mut(new, &mut |t| {
            t.set_position(next);
            next += 1;
        });
    }
}
