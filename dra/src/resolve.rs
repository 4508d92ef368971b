//! Which opaque config applies to which allocated device: NVIDIA's resolution
//! (`device_state.go:prepareDevices`, `GetOpaqueDeviceConfigs`; dra-facts §5).

use crate::claim::{AllocationConfig, AllocationResult};
use crate::config::{decode, Allowed, ConfigError, ConfigKind, DeviceConfig};

/// The configs of the allocation that are ours, decoded, lowest precedence first.
pub fn decode_all(
    configs: &[&AllocationConfig],
    allowed: Allowed,
) -> Result<Vec<(Vec<String>, DeviceConfig)>, ConfigError> {
    configs
        .iter()
        .filter_map(|c| c.opaque.as_ref().map(|o| (c, o)))
        .map(|(c, o)| Ok((c.requests.clone(), decode(&o.parameters, allowed)?)))
        .collect()
}

/// The config of one allocated device of kind `actual` (NVIDIA's resolution: scanned from the
/// highest precedence; a config naming the device's request wins, else the first without
/// requests of the device's kind; naming a request of the wrong kind is an error).
pub fn config_for<'a>(
    configs: &'a [(Vec<String>, DeviceConfig)],
    result: &AllocationResult,
    actual: ConfigKind,
) -> Result<Option<&'a DeviceConfig>, ConfigError> {
    let names = |r: &Vec<String>| {
        r.iter()
            .any(|n| n == &result.request || n == result.parent_request())
    };
    if let Some((_, c)) = configs.iter().rev().find(|(r, _)| names(r)) {
        if c.kind != actual {
            return Err(ConfigError::WrongKind {
                kind: c.kind.name(),
                device: result.device.clone(),
                request: result.request.clone(),
                actual: match actual {
                    ConfigKind::Gpu => "full GPU",
                    ConfigKind::Mig => "MIG device",
                },
            });
        }
        return Ok(Some(c));
    }
    Ok(configs
        .iter()
        .rev()
        .find(|(r, c)| r.is_empty() && c.kind == actual)
        .map(|(_, c)| c))
}

#[cfg(test)]
#[path = "resolve_tests.rs"]
mod tests;
