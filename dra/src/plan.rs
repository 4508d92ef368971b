//! What preparing a claim will do, decided before anything is changed: which of this node's
//! devices it gets, each device's sharing (from the opaque configs), and the claim's MPS limits,
//! all checked against the devices. Any error here leaves the node untouched.

use std::collections::BTreeMap;

use crate::claim::{self, AllocationResult, ResourceClaim};
use crate::config::{Allowed, ConfigError, ConfigKind, Interval, MpsSettings, Sharing};
use crate::devices::NodeDevice;
use crate::error::DraError;
use crate::mps::ClaimMps;
use crate::resolve;

/// One allocated device of ours.
#[derive(Debug, Clone)]
pub struct Planned<'a> {
    pub result: AllocationResult,
    pub device: &'a NodeDevice,
}

/// Everything a claim's preparation does.
#[derive(Debug, Clone)]
pub struct ClaimPlan<'a> {
    pub devices: Vec<Planned<'a>>,
    /// (GPU UUID, interval) to set.
    pub time_slices: Vec<(String, Interval)>,
    pub mps: Option<ClaimMps>,
}

fn unknown(claim: &ResourceClaim, r: &AllocationResult, devices: &[NodeDevice]) -> DraError {
    let mut known: Vec<&str> = devices.iter().map(|d| d.name.as_str()).collect();
    known.truncate(16);
    DraError::UnknownDevice {
        claim: claim.key(),
        pool: r.pool.clone(),
        device: r.device.clone(),
        known: known.join(", "),
    }
}

/// The claim's MPS limits: `settings` applied to `devs` (thread percentage 100 when unset;
/// per-device limits keyed by UUID or by position in `devs`; every limit within the device).
pub fn mps_limits(settings: &MpsSettings, devs: &[&NodeDevice]) -> Result<ClaimMps, ConfigError> {
    for key in settings.per_device_pinned_limit.keys() {
        let by_uuid = devs.iter().any(|d| &d.uuid == key);
        let by_index = key.parse::<usize>().is_ok_and(|i| i < devs.len());
        if !by_uuid && !by_index {
            return Err(ConfigError::Limit {
                key: format!("defaultPerDevicePinnedMemoryLimit[{key}]"),
                message: format!(
                    "invalid device: neither the UUID of a device of this claim nor an index below {}",
                    devs.len()
                ),
            });
        }
    }
    let mut limits = Vec::new();
    for (i, d) in devs.iter().enumerate() {
        let per = &settings.per_device_pinned_limit;
        let (key, bytes) = match per.get(&d.uuid).or_else(|| per.get(&i.to_string())) {
            Some(b) => (
                format!("defaultPerDevicePinnedMemoryLimit[{}]", d.uuid),
                Some(*b),
            ),
            None => (
                "defaultPinnedDeviceMemoryLimit".to_string(),
                settings.default_pinned_limit,
            ),
        };
        if let Some(b) = bytes {
            if d.memory_bytes > 0 && b > d.memory_bytes {
                return Err(ConfigError::Limit {
                    key,
                    message: format!(
                        "{} MiB is above the memory of {} ({} MiB)",
                        b >> 20,
                        d.name,
                        d.memory_bytes >> 20
                    ),
                });
            }
        }
        limits.push(bytes.map(|b| b >> 20));
    }
    Ok(ClaimMps {
        uuids: devs.iter().map(|d| d.uuid.clone()).collect(),
        active_thread_percentage: settings.active_thread_percentage.unwrap_or(100),
        pinned_limits_mib: limits,
        shared: false,
    })
}

/// A consumable-capacity share (KEP-5075) without a sharing config: MPS limited to the capacity
/// it consumed (`threadPercentage`, `memory`).
fn share_mps(r: &AllocationResult, allowed: Allowed) -> Option<Sharing> {
    let consumed = r.consumed_capacity.as_ref()?;
    if !allowed.consumable_mps || r.share_id.is_none() {
        return None;
    }
    let text = |k: &str| {
        consumed.get(k).map(|v| match v {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        })
    };
    let pct = text(crate::slices::THREAD_PERCENTAGE).and_then(|t| t.parse::<u32>().ok());
    let mem = text("memory").and_then(|t| crate::quantity::parse_bytes(&t).ok());
    Some(Sharing::Mps(MpsSettings {
        active_thread_percentage: pct,
        default_pinned_limit: mem,
        per_device_pinned_limit: BTreeMap::new(),
    }))
}

/// Whether the claim's MPS devices are consumable-capacity shares, served by their GPU's one
/// shared control daemon: all of them or none, and of one GPU (a client reaches one daemon).
fn shared_mps(devices: &[Planned<'_>], m: &ClaimMps) -> Result<bool, ConfigError> {
    let mps = || devices.iter().filter(|p| m.uuids.contains(&p.device.uuid));
    let shares = mps().filter(|p| p.result.share_id.is_some()).count();
    let err = |message: &str| ConfigError::Limit {
        key: "sharing".into(),
        message: message.into(),
    };
    match shares {
        0 => Ok(false),
        n if n != mps().count() => Err(err(
            "MPS devices of one claim are either all consumable-capacity shares or none: split the claim",
        )),
        _ if m.uuids.len() != 1 => Err(err(
            "MPS shares of one claim must be of one GPU (a client reaches one MPS control daemon): one claim per GPU",
        )),
        _ => Ok(true),
    }
}

/// Plans `claim` for `driver` on the node whose pool is `pool`.
pub fn plan<'a>(
    claim: &ResourceClaim,
    driver: &str,
    pool: &str,
    devices: &'a [NodeDevice],
    allowed: Allowed,
) -> Result<ClaimPlan<'a>, DraError> {
    let alloc = claim.allocation()?;
    let cfg_err = |source| DraError::Config {
        claim: claim.key(),
        source,
    };
    let configs = resolve::decode_all(&claim::ordered_configs(&alloc.config, driver), allowed)
        .map_err(cfg_err)?;
    let mut out = ClaimPlan {
        devices: Vec::new(),
        time_slices: Vec::new(),
        mps: None,
    };
    let mut mps: Option<(MpsSettings, Vec<&NodeDevice>)> = None;
    for r in claim::results_for(alloc, driver) {
        let dev = devices
            .iter()
            .find(|d| d.name == r.device)
            .filter(|_| r.pool == pool)
            .ok_or_else(|| unknown(claim, r, devices))?;
        let kind = if dev.is_mig() {
            ConfigKind::Mig
        } else {
            ConfigKind::Gpu
        };
        let sharing = resolve::config_for(&configs, r, kind)
            .map_err(cfg_err)?
            .and_then(|c| c.sharing.clone())
            .or_else(|| share_mps(r, allowed));
        match sharing {
            Some(Sharing::TimeSlicing(i)) => out.time_slices.push((dev.uuid.clone(), i)),
            Some(Sharing::Mps(s)) => match &mut mps {
                None => mps = Some((s, vec![dev])),
                Some((first, devs)) if *first == s => devs.push(dev),
                Some(_) => {
                    return Err(cfg_err(ConfigError::Limit {
                        key: "sharing".into(),
                        message: "the MPS devices of one claim share one control daemon: give them one mpsConfig".into(),
                    }))
                }
            },
            None => {}
        }
        out.devices.push(Planned {
            result: r.clone(),
            device: dev,
        });
    }
    if let Some((s, devs)) = mps {
        let mut m = mps_limits(&s, &devs).map_err(cfg_err)?;
        m.shared = shared_mps(&out.devices, &m).map_err(cfg_err)?;
        out.mps = Some(m);
    }
    Ok(out)
}

/// Device name → claim UID of every device held by a prepared claim other than `uid` (shared
/// allocations — admin access or a consumable-capacity share — excepted).
pub fn busy<'a>(
    held: impl Iterator<Item = (&'a String, &'a crate::checkpoint::ClaimEntry)>,
    uid: &str,
) -> BTreeMap<String, String> {
    held.filter(|(u, _)| u.as_str() != uid)
        .flat_map(|(u, e)| {
            e.devices
                .iter()
                .filter(|d| d.share_id.is_none())
                .map(move |d| (d.device.clone(), u.clone()))
        })
        .collect()
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
