//! This node's ResourceSlices (resource.k8s.io/v1), built from the device catalogue and checked
//! against the API server's validation limits before they are sent (dra-facts §3), so a node
//! with too much to say fails here with a message naming the device, not at the API server.
//!
//! One pool per node (pool name = node name, as NVIDIA's driver), split into slices of at most
//! 128 devices (64 when any device carries taints or counters). An unhealthy device is either
//! tainted (`gpu.nvidia.com/unhealthy`, effect NoSchedule; needs the DRADeviceTaints gate, beta
//! and on in 1.36) or left out of the slices ([`UnhealthyPolicy`]).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Value};

use crate::devices::NodeDevice;
use crate::error::DraError;

pub const MAX_DEVICES: usize = 128;
pub const MAX_DEVICES_WITH_TAINTS: usize = 64;
pub const MAX_ATTRIBUTES_AND_CAPACITIES: usize = 32;
pub const MAX_ATTRIBUTE_STRING: usize = 64;
pub const MAX_ID_LEN: usize = 32;
pub const MAX_DOMAIN_LEN: usize = 63;
pub const MAX_NAME: usize = 253;
/// Counter sets per slice, counters per set, consumption entries per device and counters per
/// entry (KEP-4815's limits, dra-facts §3).
pub const MAX_COUNTER_SETS: usize = 8;
pub const MAX_COUNTERS: usize = 32;
pub const MAX_CONSUMES: usize = 2;
/// The taint key of an unhealthy device.
pub const UNHEALTHY_TAINT: &str = "gpu.nvidia.com/unhealthy";

/// What an unhealthy device becomes in the slices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum UnhealthyPolicy {
    /// Published with a NoSchedule taint (DRADeviceTaints).
    Taint,
    /// Not published.
    Withdraw,
}

fn dns_label(s: &str, max: usize) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn dns_subdomain(s: &str, max: usize) -> bool {
    s.len() <= max && s.split('.').all(|l| dns_label(l, 63))
}

fn c_identifier(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_ID_LEN
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && !s.as_bytes()[0].is_ascii_digit()
}

/// A qualified attribute or capacity name: `<C identifier>` or `<domain>/<C identifier>`.
pub fn valid_qualified_name(name: &str) -> bool {
    match name.split_once('/') {
        None => c_identifier(name),
        Some((dom, id)) => dns_subdomain(dom, MAX_DOMAIN_LEN) && c_identifier(id),
    }
}

/// Checks one device against the per-device limits.
pub fn check_device(d: &Value) -> Result<(), String> {
    let name = d.get("name").and_then(Value::as_str).unwrap_or("");
    if !dns_label(name, 63) {
        return Err(format!("device name {name:?} is not a DNS label"));
    }
    let attrs = d.get("attributes").and_then(Value::as_object);
    let caps = d.get("capacity").and_then(Value::as_object);
    let n = attrs.map_or(0, |a| a.len()) + caps.map_or(0, |c| c.len());
    if n > MAX_ATTRIBUTES_AND_CAPACITIES {
        return Err(format!(
            "device {name}: {n} attributes and capacities, at most {MAX_ATTRIBUTES_AND_CAPACITIES}"
        ));
    }
    let consumes = d.get("consumesCounters").and_then(Value::as_array);
    if consumes.map_or(0, Vec::len) > MAX_CONSUMES {
        return Err(format!(
            "device {name}: more than {MAX_CONSUMES} consumesCounters entries"
        ));
    }
    for c in consumes.into_iter().flatten() {
        check_counters(c).map_err(|m| format!("device {name}: consumesCounters: {m}"))?;
    }
    for (k, v) in attrs
        .into_iter()
        .flatten()
        .chain(caps.into_iter().flatten())
    {
        if !valid_qualified_name(k) {
            return Err(format!("device {name}: invalid attribute name {k:?}"));
        }
        if let Some(s) = v.get("string").and_then(Value::as_str) {
            if s.len() > MAX_ATTRIBUTE_STRING {
                return Err(format!(
                    "device {name}: attribute {k} is {} bytes, at most {MAX_ATTRIBUTE_STRING}",
                    s.len()
                ));
            }
        }
    }
    Ok(())
}

/// Checks a counter set or a consumption entry: its set name a DNS label, at most 32 counters,
/// each named by a DNS label.
pub fn check_counters(c: &Value) -> Result<(), String> {
    let set = c
        .get("name")
        .or_else(|| c.get("counterSet"))
        .and_then(Value::as_str)
        .unwrap_or("");
    if !dns_label(set, 63) {
        return Err(format!("counter set name {set:?} is not a DNS label"));
    }
    let counters = c.get("counters").and_then(Value::as_object);
    let n = counters.map_or(0, |m| m.len());
    if n == 0 || n > MAX_COUNTERS {
        return Err(format!("{set}: {n} counters, 1 to {MAX_COUNTERS} allowed"));
    }
    match counters
        .into_iter()
        .flatten()
        .find(|(k, _)| !dns_label(k, 63))
    {
        Some((k, _)) => Err(format!("{set}: counter name {k:?} is not a DNS label")),
        None => Ok(()),
    }
}

/// The capacity of an MPS share's thread percentage (consumable capacity).
pub const THREAD_PERCENTAGE: &str = "threadPercentage";

/// A full GPU shared by consumable capacity (KEP-5075): several claims may be allocated it, each
/// consuming a thread percentage (1..100, default 10) and memory (1 MiB steps, default a tenth).
fn consumable(d: &NodeDevice, v: &mut Value) {
    let mib = 1u64 << 20;
    let tenth = (d.memory_bytes / 10 / mib).max(1) * mib;
    v["allowMultipleAllocations"] = json!(true);
    v["capacity"] = json!({
        "memory": { "value": d.memory_bytes.to_string(), "requestPolicy": {
            "default": tenth.to_string(),
            "validRange": { "min": mib.to_string(), "step": mib.to_string() } } },
        THREAD_PERCENTAGE: { "value": "100", "requestPolicy": {
            "default": "10", "validRange": { "min": "1", "max": "100", "step": "1" } } },
    });
}

/// One device as a ResourceSlice entry; `unhealthy` adds the taint; `shared` publishes a full
/// GPU as consumable capacity.
pub fn device_json(d: &NodeDevice, unhealthy: Option<&str>, shared: bool) -> Value {
    let mut v = json!({
        "name": d.name,
        "attributes": d.attributes,
        "capacity": { "memory": { "value": d.memory_bytes.to_string() } },
    });
    if let Some(slot) = &d.slot {
        v["consumesCounters"] =
            json!([{ "counterSet": slot.counter_set, "counters": slot.counters() }]);
        slot.add_capacity(&mut v["capacity"]);
    } else if shared && !d.is_mig() {
        consumable(d, &mut v);
    }
    if let Some(reason) = unhealthy {
        let value: String = reason
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            .take(63)
            .collect();
        v["taints"] = json!([{ "key": UNHEALTHY_TAINT, "value": value.trim_matches(['-', '_', '.']), "effect": "NoSchedule" }]);
    }
    v
}

/// The slices of `node` for `driver`: devices in catalogue order, unhealthy ones (by UUID →
/// reason) tainted or withdrawn. `generation` is the pool generation to publish.
pub fn build(
    driver: &str,
    node: &str,
    devices: &[NodeDevice],
    unhealthy: &BTreeMap<String, String>,
    policy: UnhealthyPolicy,
    shared: bool,
    generation: i64,
) -> Result<Vec<Value>, DraError> {
    let mut entries = Vec::new();
    for d in devices.iter().filter(|d| d.offered()) {
        let bad = unhealthy
            .get(&d.uuid)
            .or_else(|| unhealthy.get(&d.gpu_uuid));
        if bad.is_some() && policy == UnhealthyPolicy::Withdraw {
            continue;
        }
        let v = device_json(d, bad.map(String::as_str), shared);
        check_device(&v).map_err(|message| DraError::Slice {
            name: node.to_string(),
            message,
        })?;
        entries.push(v);
    }
    let sets = crate::partition::counter_sets(devices);
    for set in &sets {
        check_counters(set).map_err(|message| DraError::Slice {
            name: node.to_string(),
            message,
        })?;
    }
    let tainted = entries
        .iter()
        .any(|e| e.get("taints").is_some() || e.get("consumesCounters").is_some());
    let per = if tainted {
        MAX_DEVICES_WITH_TAINTS
    } else {
        MAX_DEVICES
    };
    // A slice holds devices or shared counters, never both (dra-facts §3): counter slices first.
    let mut chunks: Vec<(&str, Vec<Value>)> = sets
        .chunks(MAX_COUNTER_SETS)
        .map(|c| ("sharedCounters", c.to_vec()))
        .collect();
    if entries.is_empty() && chunks.is_empty() {
        chunks.push(("devices", Vec::new()));
    }
    chunks.extend(entries.chunks(per).map(|c| ("devices", c.to_vec())));
    let count = chunks.len();
    chunks
        .into_iter()
        .enumerate()
        .map(|(i, (field, items))| {
            let name = slice_name(node, driver, i)?;
            let mut spec = json!({
                "driver": driver,
                "nodeName": node,
                "pool": { "name": node, "generation": generation, "resourceSliceCount": count },
            });
            spec[field] = json!(items);
            Ok(json!({
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": { "name": name },
                "spec": spec,
            }))
        })
        .collect()
}

/// `<node>-<driver>-<i>`, a DNS subdomain of at most 253 characters.
pub fn slice_name(node: &str, driver: &str, i: usize) -> Result<String, DraError> {
    let name = format!("{node}-{driver}-{i}");
    if !dns_subdomain(&name, MAX_NAME) {
        return Err(DraError::Invalid {
            what: "ResourceSlice name",
            value: name,
            why: "not a DNS subdomain of at most 253 characters (node name too long?)".into(),
        });
    }
    Ok(name)
}

/// The spec part that matters for "did it change" (pool generation excluded).
pub fn content(slice: &Value) -> Value {
    let mut spec = slice.get("spec").cloned().unwrap_or(Value::Null);
    if let Some(p) = spec.get_mut("pool").and_then(Value::as_object_mut) {
        p.remove("generation");
    }
    spec
}

/// Names of `slices`.
pub fn names(slices: &[Value]) -> BTreeSet<String> {
    slices
        .iter()
        .filter_map(|s| s.pointer("/metadata/name").and_then(Value::as_str))
        .map(String::from)
        .collect()
}

#[cfg(test)]
#[path = "slices_tests.rs"]
mod tests;
