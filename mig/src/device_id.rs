//! PCI device ids as mig-parted writes them in `device-filter`: `0xDDDDVVVV` (device << 16 |
//! vendor), optionally with a subsystem part `0xSSSSsvsv` after a `:` (mig-parted v0.15.0
//! `pkg/types/device.go`).
//!
//! A filter without a subsystem matches every subsystem; one with a subsystem needs all four ids
//! to be equal. A malformed filter never matches and raises no error, as in mig-parted.

use std::fmt;

/// A GPU's PCI identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DeviceId {
    pub device: u16,
    pub vendor: u16,
    /// `(subsystem device, subsystem vendor)`, when known.
    pub subsystem: Option<(u16, u16)>,
}

/// Why a string is not a device id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeviceIdError {
    #[error("unable to create DeviceID from {0:?}: expected 0xDDDDVVVV")]
    Primary(String),
    #[error("unable to create Subsystem from {0:?}: expected 0xSSSSVVVV")]
    Subsystem(String),
    #[error("invalid DeviceID format {0:?}: expected 0xDDDDVVVV[:0xSSSSVVVV]")]
    Format(String),
}

/// `device << 16 | vendor` -> `(device, vendor)`.
fn split(v: u32) -> (u16, u16) {
    let [a, b, c, d] = v.to_be_bytes();
    (u16::from_be_bytes([a, b]), u16::from_be_bytes([c, d]))
}

fn pair(s: &str) -> Option<(u16, u16)> {
    let hex = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X"))?;
    if hex.is_empty() || hex.len() > 8 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let v = u32::from_str_radix(hex, 16).ok()?;
    Some(split(v))
}

impl DeviceId {
    /// `0xDDDDVVVV` or `0xDDDDVVVV:0xSSSSVVVV`.
    pub fn parse(s: &str) -> Result<DeviceId, DeviceIdError> {
        let parts: Vec<&str> = s.split(':').collect();
        let (primary, sub) = match parts.as_slice() {
            [p] => (*p, None),
            [p, s] => (*p, Some(*s)),
            _ => return Err(DeviceIdError::Format(s.to_string())),
        };
        let (device, vendor) =
            pair(primary).ok_or_else(|| DeviceIdError::Primary(s.to_string()))?;
        let subsystem = match sub {
            Some(x) => Some(pair(x).ok_or_else(|| DeviceIdError::Subsystem(s.to_string()))?),
            None => None,
        };
        Ok(DeviceId {
            device,
            vendor,
            subsystem,
        })
    }

    /// From NVML's `pciDeviceId` / `pciSubSystemId` (both `device << 16 | vendor`).
    pub fn from_nvml(pci_device_id: u32, pci_sub_system_id: Option<u32>) -> DeviceId {
        let (device, vendor) = split(pci_device_id);
        DeviceId {
            device,
            vendor,
            subsystem: pci_sub_system_id.map(split),
        }
    }

    /// The primary id only (`0xDDDDVVVV`), as `export` writes it.
    pub fn primary(&self) -> String {
        format!("0x{:04X}{:04X}", self.device, self.vendor)
    }

    /// Whether this (filter) id matches the `hardware` id.
    pub fn matches(&self, hardware: &DeviceId) -> bool {
        if (self.device, self.vendor) != (hardware.device, hardware.vendor) {
            return false;
        }
        match self.subsystem {
            None => true,
            Some(s) => hardware.subsystem == Some(s),
        }
    }
}

impl fmt::Display for DeviceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.primary())?;
        if let Some((d, v)) = self.subsystem {
            write!(f, ":0x{d:04X}{v:04X}")?;
        }
        Ok(())
    }
}

/// Whether a `device-filter` (list of strings, empty: no filter) matches `hardware`; a malformed
/// entry never matches.
pub fn filter_matches(filter: &[String], hardware: &DeviceId) -> bool {
    if filter.is_empty() {
        return true;
    }
    filter.iter().any(|f| {
        f.is_empty()
            || DeviceId::parse(f)
                .map(|id| id.matches(hardware))
                .unwrap_or(false)
    })
}
