//! Which GPUs a config names: `devices: all`, a count, or indexes and UUIDs; MIG devices and
//! MIG-enabled GPUs are refused (MPS on MIG is not supported), each error naming its key.

use crate::config::{ConfigError, DeviceId, Devices};
use crate::inventory::GpuFacts;

const MIG_ERR: &str = "MPS on MIG devices is not supported";

/// The GPUs a `devices` value selects, each with the key to blame for it.
pub(crate) fn select<'a>(
    devices: &Devices,
    gpus: &'a [GpuFacts],
    key: &str,
    warnings: &mut Vec<String>,
) -> Result<Vec<(&'a GpuFacts, String)>, ConfigError> {
    let full: Vec<&GpuFacts> = gpus.iter().filter(|g| !g.mig_enabled).collect();
    match devices {
        Devices::All => {
            for g in gpus.iter().filter(|g| g.mig_enabled) {
                warnings.push(format!(
                    "{key}: skipping GPU {} ({}): MIG is enabled and {MIG_ERR}",
                    g.index, g.uuid
                ));
            }
            if full.is_empty() {
                return Err(ConfigError::invalid(
                    key,
                    "`all` selects no GPU: the node has no full (non-MIG) GPU",
                ));
            }
            Ok(full.into_iter().map(|g| (g, key.to_string())).collect())
        }
        Devices::Count(n) => {
            let want = usize::try_from(*n)
                .ok()
                .filter(|w| (1..=full.len()).contains(w));
            let Some(want) = want else {
                return Err(ConfigError::invalid(
                    key,
                    format!(
                        "asks for {n} GPUs but the node has {} full (non-MIG) GPUs",
                        full.len()
                    ),
                ));
            };
            Ok(full
                .into_iter()
                .take(want)
                .map(|g| (g, key.to_string()))
                .collect())
        }
        Devices::List(ids) => {
            if ids.is_empty() {
                return Err(ConfigError::invalid(
                    key,
                    "empty device list; use `all`, a count, or indexes/UUIDs",
                ));
            }
            ids.iter()
                .enumerate()
                .map(|(j, id)| {
                    let k = format!("{key}[{j}]");
                    find(id, gpus, &k).map(|g| (g, k))
                })
                .collect()
        }
    }
}

/// Finds one full GPU by index or UUID; MIG devices and MIG-enabled GPUs are refused.
pub(crate) fn find<'a>(
    id: &DeviceId,
    gpus: &'a [GpuFacts],
    key: &str,
) -> Result<&'a GpuFacts, ConfigError> {
    let found = match id {
        DeviceId::Index(i) => gpus.iter().find(|g| g.index == *i),
        DeviceId::Uuid(u) => {
            if let Some(m) = gpus
                .iter()
                .flat_map(|g| &g.mig_uuids)
                .find(|m| m.eq_ignore_ascii_case(u))
            {
                return Err(ConfigError::invalid(
                    key,
                    format!("{MIG_ERR}: {m}; use a full GPU"),
                ));
            }
            gpus.iter().find(|g| g.uuid.eq_ignore_ascii_case(u))
        }
    };
    let g = found.ok_or_else(|| {
        let known: Vec<String> = gpus
            .iter()
            .map(|g| format!("{} ({})", g.index, g.uuid))
            .collect();
        ConfigError::invalid(
            key,
            format!(
                "unknown device {:?}; this node has GPUs: {}",
                id.to_string(),
                known.join(", ")
            ),
        )
    })?;
    if g.mig_enabled {
        return Err(ConfigError::invalid(
            key,
            format!(
                "{MIG_ERR}: {} (MIG mode is enabled); use a full GPU",
                g.uuid
            ),
        ));
    }
    Ok(g)
}
