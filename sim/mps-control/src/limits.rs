//! Parsing and formatting of MPS resource limits.
//!
//! The real control daemon accepts thread percentages as decimals in `(0, 100]` and prints
//! them with one decimal (`25.0`); pinned device memory limits are a number with a unit
//! (`4096M`, `2G`) and are printed back in MiB (`4096M`). Devices are named by ordinal
//! (position in the daemon's `CUDA_VISIBLE_DEVICES`) or by UUID; both are normalised to
//! one key so that a limit set by UUID and a client asking by ordinal meet.

use std::collections::BTreeMap;

use crate::error::LimitError;

const MIB: u64 = 1024 * 1024;

/// Per-device pinned memory limits in bytes, keyed by canonical device key.
pub type PinnedLimits = BTreeMap<String, u64>;

/// Parses an active thread percentage: a decimal in `(0, 100]`.
pub fn parse_percentage(s: &str) -> Result<f64, LimitError> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 100.0 => Ok(v),
        _ => Err(LimitError::Percentage(s.to_string())),
    }
}

/// Formats a percentage the way the real daemon prints it (`25.0`).
pub fn format_percentage(v: f64) -> String {
    format!("{v:.1}")
}

/// Parses a memory value such as `4096M`, `2G`, `512k`, `1T` into bytes.
pub fn parse_mem(s: &str) -> Result<u64, LimitError> {
    let t = s.trim();
    let err = || LimitError::Memory(s.to_string());
    let (num, unit) = t.split_at(t.len().saturating_sub(1));
    let mult = match unit.to_ascii_uppercase().as_str() {
        "K" => 1024,
        "M" => MIB,
        "G" => 1024 * MIB,
        "T" => 1024 * 1024 * MIB,
        _ => return Err(err()),
    };
    if num.is_empty() || !num.bytes().all(|b| b.is_ascii_digit()) {
        return Err(err());
    }
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(err)
}

/// Formats a byte count in MiB (`4096M`), as the real daemon reports limits.
pub fn format_mem(bytes: u64) -> String {
    format!("{}M", bytes / MIB)
}

/// The devices the daemon serves, from its `CUDA_VISIBLE_DEVICES`.
#[derive(Debug, Clone, Default)]
pub struct Devices {
    /// `None` when `CUDA_VISIBLE_DEVICES` was unset (every device visible, UUIDs unknown).
    visible: Option<Vec<String>>,
}

impl Devices {
    /// Builds the device table from a `CUDA_VISIBLE_DEVICES` value.
    pub fn from_visible(value: Option<&str>) -> Self {
        let visible = value.map(|v| {
            v.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect()
        });
        Devices { visible }
    }

    /// Resolves an ordinal or UUID to the canonical key (the ordinal when it can be known).
    pub fn resolve(&self, dev: &str) -> Result<String, LimitError> {
        let dev = dev.trim();
        if !dev.is_empty() && dev.bytes().all(|b| b.is_ascii_digit()) {
            let idx: usize = dev
                .parse()
                .map_err(|_| LimitError::Device(dev.to_string()))?;
            return match &self.visible {
                Some(list) if idx >= list.len() => Err(LimitError::DeviceOrdinal {
                    dev: dev.to_string(),
                    count: list.len(),
                }),
                _ => Ok(idx.to_string()),
            };
        }
        if dev.starts_with("GPU-") || dev.starts_with("MIG-") {
            return match &self.visible {
                Some(list) => list
                    .iter()
                    .position(|d| d == dev)
                    .map(|i| i.to_string())
                    .ok_or_else(|| LimitError::DeviceNotVisible(dev.to_string())),
                None => Ok(dev.to_string()),
            };
        }
        Err(LimitError::DeviceName(dev.to_string()))
    }
}

/// Parses a client's `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT` (`0=1G,1=512M`).
pub fn parse_pinned_env(devices: &Devices, s: &str) -> Result<PinnedLimits, LimitError> {
    let mut out = PinnedLimits::new();
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (dev, val) = item
            .split_once('=')
            .ok_or_else(|| LimitError::PinnedEntry(item.to_string()))?;
        out.insert(devices.resolve(dev)?, parse_mem(val)?);
    }
    Ok(out)
}

/// Formats limits as `0=4096M,1=2048M`, or `none` when there are none.
pub fn format_pinned(limits: &PinnedLimits) -> String {
    if limits.is_empty() {
        return "none".to_string();
    }
    limits
        .iter()
        .map(|(k, v)| format!("{k}={}", format_mem(*v)))
        .collect::<Vec<_>>()
        .join(",")
}

/// Effective limits: a client may only lower what its server allows.
pub fn effective_pinned(server: &PinnedLimits, requested: &PinnedLimits) -> PinnedLimits {
    let mut out = server.clone();
    for (k, v) in requested {
        out.entry(k.clone())
            .and_modify(|cur| *cur = (*cur).min(*v))
            .or_insert(*v);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_values() {
        assert_eq!(parse_mem("4096M").unwrap(), 4096 * MIB);
        assert_eq!(parse_mem("2g").unwrap(), 2048 * MIB);
        assert_eq!(format_mem(parse_mem("2G").unwrap()), "2048M");
        assert!(parse_mem("12").is_err());
        assert!(parse_mem("M").is_err());
        assert!(parse_mem("-1G").is_err());
        assert!(parse_mem("1.5G").is_err());
    }

    #[test]
    fn percentages() {
        assert_eq!(format_percentage(parse_percentage("25").unwrap()), "25.0");
        assert!(parse_percentage("0").is_err());
        assert!(parse_percentage("101").is_err());
        assert!(parse_percentage("abc").is_err());
    }

    #[test]
    fn devices_resolve_by_uuid_and_ordinal() {
        let d = Devices::from_visible(Some("GPU-aaa,GPU-bbb"));
        assert_eq!(d.resolve("GPU-bbb").unwrap(), "1");
        assert_eq!(d.resolve("0").unwrap(), "0");
        assert!(d.resolve("2").is_err());
        assert!(d.resolve("GPU-ccc").is_err());
        assert!(d.resolve("foo").is_err());
        let any = Devices::from_visible(None);
        assert_eq!(any.resolve("GPU-ccc").unwrap(), "GPU-ccc");
        assert_eq!(any.resolve("7").unwrap(), "7");
    }

    #[test]
    fn effective_is_min() {
        let d = Devices::from_visible(Some("GPU-a,GPU-b"));
        let server = parse_pinned_env(&d, "0=4G").unwrap();
        let req = parse_pinned_env(&d, "0=8G,1=512M").unwrap();
        assert_eq!(
            format_pinned(&effective_pinned(&server, &req)),
            "0=4096M,1=512M"
        );
        assert_eq!(format_pinned(&PinnedLimits::new()), "none");
    }
}
