//! `export`: the node's current layout as a config that re-applies to the same layout
//! (mig-parted's `export/config.go`): one entry per GPU, merged where mode and devices are
//! equal; `device-filter` only when the node has more than one device id and more than one
//! entry; `devices: all` when an entry covers every GPU of its filter.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::state::GpuState;

#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    filter: Vec<String>,
    devices: Vec<u32>,
    enabled: bool,
    layout: BTreeMap<String, u32>,
}

/// The YAML text of a config named `label` that describes `gpus` as they are.
pub fn export_yaml(gpus: &[GpuState], label: &str) -> String {
    let mut entries: Vec<Entry> = Vec::new();
    for g in gpus
        .iter()
        .filter(|g| g.mig != crate::state::MigMode::NotCapable)
    {
        let filter = vec![g.device_id.primary()];
        let enabled = g.mig.enabled();
        let layout = if enabled { g.layout() } else { BTreeMap::new() };
        match entries
            .iter_mut()
            .find(|e| e.filter == filter && e.enabled == enabled && e.layout == layout)
        {
            Some(e) => e.devices.push(g.index),
            None => entries.push(Entry {
                filter,
                devices: vec![g.index],
                enabled,
                layout,
            }),
        }
    }
    let mut ids: Vec<String> = gpus.iter().map(|g| g.device_id.primary()).collect();
    ids.sort();
    ids.dedup();
    let keep_filter = ids.len() > 1 && entries.len() > 1;
    let mut out = format!("version: v1\nmig-configs:\n  {}:\n", quote(label));
    if entries.is_empty() {
        out.push_str("  []\n");
    }
    for e in &entries {
        let all_of_filter = gpus
            .iter()
            .filter(|g| !keep_filter || e.filter.contains(&g.device_id.primary()))
            .all(|g| e.devices.contains(&g.index));
        let mut lead = "    - ";
        if keep_filter {
            let _ = writeln!(out, "{lead}device-filter: {}", quote(&e.filter[0]));
            lead = "      ";
        }
        let devices = if all_of_filter {
            "all".to_string()
        } else {
            let list: Vec<String> = e.devices.iter().map(u32::to_string).collect();
            format!("[{}]", list.join(", "))
        };
        let _ = writeln!(out, "{lead}devices: {devices}");
        let _ = writeln!(out, "      mig-enabled: {}", e.enabled);
        if e.enabled {
            if e.layout.is_empty() {
                out.push_str("      mig-devices: {}\n");
            } else {
                out.push_str("      mig-devices:\n");
                for (k, v) in &e.layout {
                    let _ = writeln!(out, "        {}: {v}", quote(k));
                }
            }
        }
    }
    out
}

fn quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("\"{s}\""))
}
