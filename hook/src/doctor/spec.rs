//! The CDI spec: present, valid, matching the driver and the MIG layout, not shadowed; and the
//! inventory cache the hook and the wrapper read.
//!
//! Specs are loaded with the runtimes' rules ([`gpuhook_cdi::Registry`], as `cdi list` does).
//! "Fresh" is judged against the node itself, not against a timestamp: the MIG cap nodes the
//! spec's devices carry must be exactly the GPU/compute instances the driver's capability tree
//! shows, the driver libraries it mounts must exist and carry the loaded driver's version.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::SystemTime;

use gpuhook_cdi::registry::LoadedSpec;
use gpuhook_cdi::{ConflictGroup, Registry};
use gpuhook_node::fingerprint::Fingerprint;
use gpuhook_node::{Inventory, Staleness};

use super::{Finding, Options};

const SPEC: &str = "cdi-spec";
const FRESH: &str = "cdi-spec-fresh";
const CONFLICTS: &str = "cdi-conflicts";
const CACHE: &str = "inventory-cache";
/// Mount sources checked for existence per spec (a real spec has about a hundred).
const MAX_CHECKED_MOUNTS: usize = 4096;
/// Largest inventory cache read (a 64-GPU MIG node's is well under 1 MiB).
const MAX_CACHE_BYTES: u64 = 16 << 20;
const CAP_NODE_PREFIX: &str = "/dev/nvidia-caps/nvidia-cap";
const REFRESH: &str =
    "`gpuhook cdi refresh` (and enable gpuhook-cdi-refresh.service so it stays fresh)";

pub(super) fn check(opts: &Options, node: Option<&Fingerprint>, out: &mut Vec<Finding>) {
    let registry = Registry::load(&opts.spec_dirs);
    let dirs: Vec<String> = opts
        .spec_dirs
        .iter()
        .map(|d| d.display().to_string())
        .collect();
    let in_conflict: BTreeSet<&Path> = registry
        .conflicts
        .iter()
        .flat_map(|c| c.files.iter().map(|p| p.as_path()))
        .collect();
    for e in registry
        .errors
        .iter()
        .filter(|e| !in_conflict.contains(e.path.as_path()))
    {
        out.push(Finding::fail(
            SPEC,
            e.to_string(),
            format!(
                "see `gpuhook cdi validate {}`; regenerate it with `gpuhook cdi generate` or remove it",
                e.path.display()
            ),
        ));
    }
    let ours: Vec<&LoadedSpec> = registry
        .specs
        .iter()
        .map(|s| s.as_ref())
        .filter(|s| s.spec.kind == opts.cdi_kind)
        .collect();
    if ours.is_empty() {
        out.push(Finding::fail(
            SPEC,
            format!("no spec of kind {} in {}", opts.cdi_kind, dirs.join(", ")),
            format!("run {REFRESH}"),
        ));
    }
    for s in &ours {
        out.push(Finding::ok(
            SPEC,
            format!(
                "{}: {} devices, cdiVersion {}, written {}",
                s.path.display(),
                s.spec.devices.len(),
                s.spec.cdi_version,
                age(&s.path)
            ),
        ));
        if let Some(fp) = node {
            out.push(freshness(s, fp));
        }
    }
    check_conflicts(opts, &registry.conflict_groups(), out);
    check_cache(opts, out);
}

/// `3m ago`, from the file's mtime.
fn age(path: &Path) -> String {
    let secs = std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| SystemTime::now().duration_since(t).ok())
        .map(|d| d.as_secs());
    match secs {
        Some(s) if s < 120 => format!("{s}s ago"),
        Some(s) if s < 7200 => format!("{}m ago", s / 60),
        Some(s) => format!("{}h ago", s / 3600),
        None => "at an unknown time".into(),
    }
}

/// Cap node minors of the MIG devices the node has now: each compute instance's and its GPU
/// instance's (a GPU instance without compute instances is no device).
fn node_caps(fp: &Fingerprint) -> BTreeSet<u32> {
    let caps = fp.mig_caps();
    let mut out = BTreeSet::new();
    for ci in caps.iter().filter(|c| c.ci.is_some()) {
        out.insert(ci.cap_minor);
        let gi = caps
            .iter()
            .find(|g| g.ci.is_none() && g.gpu_minor == ci.gpu_minor && g.gi == ci.gi);
        out.extend(gi.map(|g| g.cap_minor));
    }
    out
}

/// Cap node minors the spec's devices carry (the common edits' config/monitor caps excluded).
fn spec_caps(s: &LoadedSpec) -> BTreeSet<u32> {
    s.spec
        .devices
        .iter()
        .flat_map(|d| d.container_edits.device_nodes.iter())
        .filter_map(|n| n.path.strip_prefix(CAP_NODE_PREFIX)?.parse().ok())
        .collect()
}

fn freshness(s: &LoadedSpec, fp: &Fingerprint) -> Finding {
    let path = s.path.display();
    let (node, spec) = (node_caps(fp), spec_caps(s));
    if node != spec {
        let show = |set: &BTreeSet<u32>| {
            let v: Vec<u32> = set.iter().copied().collect();
            gpuhook_node::bounded::preview_list(&v, 8)
        };
        return Finding::fail(
            FRESH,
            format!(
                "{path} describes another MIG layout: its devices use MIG cap nodes [{}], the \
                 driver has [{}] (re-partitioned since it was written)",
                show(&spec),
                show(&node)
            ),
            format!("run {REFRESH}"),
        );
    }
    let mounts = s.spec.container_edits.mounts.iter().chain(
        s.spec
            .devices
            .iter()
            .flat_map(|d| d.container_edits.mounts.iter()),
    );
    let missing: Vec<&str> = mounts
        .take(MAX_CHECKED_MOUNTS)
        .map(|m| m.host_path.as_str())
        .filter(|p| std::fs::symlink_metadata(p).is_err())
        .collect();
    if !missing.is_empty() {
        return Finding::fail(
            FRESH,
            format!(
                "{path} mounts {} file(s) that no longer exist ({}): the driver changed since it \
                 was written",
                missing.len(),
                gpuhook_node::bounded::preview_list(&missing, 3)
            ),
            format!("run {REFRESH}"),
        );
    }
    let version = fp.driver_version().unwrap_or_default();
    let libcuda = s.spec.container_edits.mounts.iter().find_map(|m| {
        let name = Path::new(&m.host_path).file_name()?.to_str()?;
        name.strip_prefix("libcuda.so.").filter(|v| v.contains('.'))
    });
    match libcuda {
        Some(v) if !version.is_empty() && v != version => Finding::fail(
            FRESH,
            format!("{path} mounts the libraries of driver {v}; the loaded driver is {version}"),
            format!("run {REFRESH}"),
        ),
        _ => Finding::ok(
            FRESH,
            format!(
                "{path} matches the driver ({version}) and its {} MIG cap node(s)",
                node.len()
            ),
        ),
    }
}

fn check_conflicts(opts: &Options, groups: &[ConflictGroup], out: &mut Vec<Finding>) {
    let prefix = format!("{}=", opts.cdi_kind);
    let ours: Vec<&ConflictGroup> = groups
        .iter()
        .filter(|g| g.devices.iter().any(|d| d.starts_with(&prefix)))
        .collect();
    if ours.is_empty() {
        out.push(Finding::ok(
            CONFLICTS,
            format!("no other spec defines {prefix}* devices"),
        ));
    }
    for g in ours {
        let files: Vec<String> = g.files.iter().map(|f| f.display().to_string()).collect();
        let names = gpuhook_node::bounded::preview_list(&g.devices, 4);
        let (message, fix) = match &g.winner {
            None => (
                format!(
                    "{} device(s) ({names}) are defined by {} in one directory: runtimes drop them",
                    g.devices.len(),
                    files.join(" and ")
                ),
                "keep one file: remove the other, or let `gpuhook cdi generate --force` take over \
                 its name"
                    .to_string(),
            ),
            Some(w) => (
                format!(
                    "{} device(s) ({names}) are defined by {}: runtimes use {} now, and the other \
                     whenever it is missing (e.g. /var/run/cdi right after boot)",
                    g.devices.len(),
                    files.join(" and "),
                    w.display()
                ),
                format!(
                    "remove the other file(s) ({}) so one spec defines each device",
                    files
                        .iter()
                        .filter(|f| Path::new(f) != w.as_path())
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ),
        };
        out.push(Finding::fail(CONFLICTS, message, fix));
    }
}

fn check_cache(opts: &Options, out: &mut Vec<Finding>) {
    let path = &opts.inventory_cache;
    let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    if size > MAX_CACHE_BYTES {
        out.push(Finding::fail(
            CACHE,
            format!(
                "{} is {size} bytes, over the limit of {MAX_CACHE_BYTES}",
                path.display()
            ),
            format!("remove it and run {REFRESH}"),
        ));
        return;
    }
    let inv = match Inventory::load_json(path) {
        Ok(inv) => inv,
        Err(e) => {
            out.push(Finding::warn(
                CACHE,
                format!("{}: {e}", path.display()),
                format!(
                    "run {REFRESH}; without it the prestart hook and the wrapper discover the \
                     node (NVML) on every GPU container start"
                ),
            ));
            return;
        }
    };
    let now = gpuhook_node::node_driver_version(&opts.driver_root);
    match inv.staleness(&opts.driver_root, now.as_deref()) {
        Staleness::Fresh => out.push(Finding::ok(
            CACHE,
            format!("{}: driver {}", path.display(), inv.driver_version),
        )),
        Staleness::OtherDriverRoot { cached } => out.push(Finding::warn(
            CACHE,
            format!(
                "{} was made for the driver root {}, not {}",
                path.display(),
                cached.display(),
                opts.driver_root.display()
            ),
            format!("run {REFRESH} with this driver root"),
        )),
        Staleness::DriverChanged { cached, now } => out.push(Finding::warn(
            CACHE,
            format!(
                "{} is for driver {cached}; the loaded driver is {now}",
                path.display()
            ),
            format!("run {REFRESH}"),
        )),
    }
}
