//! Publishing this node's ResourceSlices: create what is missing, replace what changed (with a
//! new pool generation), delete this node's slices of this driver that are no longer wanted.
//! Only slices whose `spec.nodeName` and `spec.driver` are ours are ever touched (the RBAC of
//! the bundle limits the plugin to them too).

use std::collections::BTreeMap;

use serde_json::Value;

use crate::devices::NodeDevice;
use crate::error::DraError;
use crate::kube::Cluster;
use crate::slices::{self, UnhealthyPolicy};

/// What a publication did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Published {
    pub created: usize,
    pub replaced: usize,
    pub deleted: usize,
    pub generation: i64,
}

fn ours(s: &Value, node: &str, driver: &str) -> bool {
    s.pointer("/spec/nodeName").and_then(Value::as_str) == Some(node)
        && s.pointer("/spec/driver").and_then(Value::as_str) == Some(driver)
}

fn generation(s: &Value) -> i64 {
    s.pointer("/spec/pool/generation")
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

/// Whether `wanted` (at the current generation) is exactly what is published.
fn same_content(wanted: &[Value], by_name: &BTreeMap<String, &Value>) -> bool {
    wanted.len() == by_name.len()
        && wanted.iter().all(|s| {
            let name = s.pointer("/metadata/name").and_then(Value::as_str);
            name.and_then(|n| by_name.get(n))
                .is_some_and(|old| slices::content(old) == slices::content(s))
        })
}

/// Publishes `devices` (unhealthy ones by UUID → reason) as this node's slices; `shared`:
/// full GPUs as consumable capacity.
pub fn publish(
    cluster: &dyn Cluster,
    driver: &str,
    node: &str,
    devices: &[NodeDevice],
    unhealthy: &BTreeMap<String, String>,
    policy: UnhealthyPolicy,
    shared: bool,
) -> Result<Published, DraError> {
    let existing: Vec<Value> = cluster
        .list_slices(node, driver)?
        .into_iter()
        .filter(|s| ours(s, node, driver))
        .collect();
    let current = existing.iter().map(generation).max().unwrap_or(0);
    let by_name: BTreeMap<String, &Value> = existing
        .iter()
        .filter_map(|s| {
            s.pointer("/metadata/name")
                .and_then(Value::as_str)
                .map(|n| (n.to_string(), s))
        })
        .collect();
    let same = slices::build(driver, node, devices, unhealthy, policy, shared, current)?;
    let unchanged = same_content(&same, &by_name);
    let mut out = Published {
        generation: current,
        ..Default::default()
    };
    if unchanged {
        return Ok(out);
    }
    out.generation = current + 1;
    let wanted = slices::build(
        driver,
        node,
        devices,
        unhealthy,
        policy,
        shared,
        out.generation,
    )?;
    for mut s in wanted.iter().cloned() {
        let name = s
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        match by_name.get(&name) {
            Some(old) => {
                if let Some(rv) = old.pointer("/metadata/resourceVersion") {
                    s["metadata"]["resourceVersion"] = rv.clone();
                }
                cluster.replace_slice(&name, &s)?;
                out.replaced += 1;
            }
            None => {
                cluster.create_slice(&s)?;
                out.created += 1;
            }
        }
    }
    let keep = slices::names(&wanted);
    for name in by_name.keys().filter(|n| !keep.contains(*n)) {
        cluster.delete_slice(name)?;
        out.deleted += 1;
    }
    tracing::info!(
        node,
        generation = out.generation,
        created = out.created,
        replaced = out.replaced,
        deleted = out.deleted,
        "ResourceSlices published"
    );
    Ok(out)
}

/// Deletes every slice of this node and driver (plugin shutdown with `--wipe-slices`).
pub fn withdraw_all(cluster: &dyn Cluster, driver: &str, node: &str) -> Result<usize, DraError> {
    let mut n = 0;
    for s in cluster.list_slices(node, driver)? {
        if !ours(&s, node, driver) {
            continue;
        }
        if let Some(name) = s.pointer("/metadata/name").and_then(Value::as_str) {
            cluster.delete_slice(name)?;
            n += 1;
        }
    }
    Ok(n)
}
