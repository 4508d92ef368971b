//! The dry run: what the plugin would advertise on this node under a config set, or why it
//! cannot, as one JSON value (`gpuhook-device-plugin dry-run`). An admin runs it before a
//! ConfigMap rollout; it needs no kubelet and writes nothing.

use std::path::Path;

use gpuhook_node::Inventory;
use serde::Serialize;

use crate::advertise::Advertisement;
use crate::set::load_config_set;

/// The dry run's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "kebab-case")]
pub enum DryRun {
    /// The node's config and what it advertises.
    Ok {
        /// Where the configs were read from.
        config_path: String,
        /// The `nvidia.com/device-plugin.config` label value given, if any.
        node_label: Option<String>,
        /// Warnings: ignored keys, discarded settings.
        warnings: Vec<String>,
        advertisement: Advertisement,
        /// Other configs of the set that would fail on a node selecting them.
        other_config_errors: Vec<String>,
    },
    /// The config (or the node) cannot be used: each error names file, key and value.
    Error {
        config_path: String,
        node_label: Option<String>,
        errors: Vec<String>,
    },
}

impl DryRun {
    /// Whether the plugin would start.
    pub fn is_ok(&self) -> bool {
        matches!(self, DryRun::Ok { .. })
    }

    /// Pretty-printed JSON.
    pub fn to_json(&self) -> String {
        // Serialising plain strings, numbers and maps with string keys cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }
}

/// Loads the config set at `path`, selects the node's config by `node_label` and computes what
/// this node (`inventory`) would advertise, with every MPS daemon taken as ready.
pub fn dry_run(path: &Path, node_label: Option<&str>, inventory: &Inventory) -> DryRun {
    let config_path = path.display().to_string();
    let label = node_label.map(str::to_string);
    let fail = |errors: Vec<String>| DryRun::Error {
        config_path: config_path.clone(),
        node_label: label.clone(),
        errors,
    };
    let set = match load_config_set(path) {
        Ok(s) => s,
        Err(e) => return fail(vec![e.to_string()]),
    };
    let (name, config) = match set.select(node_label) {
        Ok(c) => c,
        Err(e) => return fail(vec![e.to_string()]),
    };
    let (advertisement, warnings) =
        match crate::build::advertise_with_warnings(name, config, inventory, &|_| true) {
            Ok(a) => a,
            Err(e) => return fail(vec![format!("config {name:?}: {e}")]),
        };
    let other_config_errors = set
        .errors()
        .iter()
        .map(ToString::to_string)
        .filter(|e| !e.is_empty())
        .collect();
    DryRun::Ok {
        config_path,
        node_label: label,
        warnings,
        advertisement,
        other_config_errors,
    }
}
