//! PCI bus ids: parsing the forms NVML accepts and printing the forms it returns.
//!
//! NVML prints `%08X:%02X:%02X.0` (and `%04X:...` in the legacy field) but accepts a bus id with
//! a 4- or 8-digit domain, in either case, so `nvmlDeviceGetHandleByPciBusId` compares parsed
//! numbers, never strings.

use std::os::raw::c_uint;

use crate::error::TableError;

/// A parsed `domain:bus:device.function`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PciAddr {
    pub domain: c_uint,
    pub bus: c_uint,
    pub device: c_uint,
    pub function: c_uint,
}

impl PciAddr {
    /// `%08X:%02X:%02X.0`, NVML's `busId`.
    pub fn bus_id(&self) -> String {
        format!(
            "{:08X}:{:02X}:{:02X}.{:X}",
            self.domain, self.bus, self.device, self.function
        )
    }

    /// `%04X:%02X:%02X.0`, NVML's `busIdLegacy`.
    pub fn bus_id_legacy(&self) -> String {
        format!(
            "{:04X}:{:02X}:{:02X}.{:X}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

/// Parses `[domain:]bus:device[.function]` (hex, any case; domain of up to 8 digits).
pub fn parse_bus_id(s: &str) -> Result<PciAddr, TableError> {
    let err = || TableError::PciBusId(s.to_string());
    let (rest, function) = match s.trim().rsplit_once('.') {
        Some((rest, f)) => (rest, hex(f, 1).ok_or_else(err)?),
        None => (s.trim(), 0),
    };
    let parts: Vec<&str> = rest.split(':').collect();
    let (domain, bus, device) = match parts.as_slice() {
        [d, b, dev] => (hex(d, 8), hex(b, 2), hex(dev, 2)),
        [b, dev] => (Some(0), hex(b, 2), hex(dev, 2)),
        _ => return Err(err()),
    };
    let (Some(domain), Some(bus), Some(device)) = (domain, bus, device) else {
        return Err(err());
    };
    if device > 0x1f || function > 7 {
        return Err(err());
    }
    Ok(PciAddr {
        domain,
        bus,
        device,
        function,
    })
}

fn hex(s: &str, max_digits: usize) -> Option<c_uint> {
    if s.is_empty() || s.len() > max_digits || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    c_uint::from_str_radix(s, 16).ok()
}

/// NVIDIA's PCI vendor id.
const NVIDIA_VENDOR: c_uint = 0x10de;

/// PCI device ids of the models our profiles use; `pciDeviceId` is `(device << 16) | vendor`.
const DEVICE_IDS: &[(&str, c_uint)] = &[
    ("Tesla T4", 0x1eb8),
    ("NVIDIA L20", 0x26ba),
    ("NVIDIA L4", 0x27b8),
    ("NVIDIA L40S", 0x26b9),
    ("NVIDIA A100-SXM4-80GB", 0x20b2),
    ("NVIDIA A100-SXM4-40GB", 0x20b0),
    ("NVIDIA A100 80GB PCIe", 0x20b5),
    ("NVIDIA A30", 0x20b7),
    ("NVIDIA H100 80GB HBM3", 0x2330),
    ("NVIDIA H100 PCIe", 0x2331),
    ("NVIDIA H200", 0x2335),
    ("NVIDIA H20", 0x2329),
];

/// `pciDeviceId` for a model name, or 0 when we do not know the model.
pub fn device_id_for(name: &str) -> c_uint {
    DEVICE_IDS
        .iter()
        .find(|(n, _)| *n == name)
        .map_or(0, |(_, id)| (id << 16) | NVIDIA_VENDOR)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_nvml_and_legacy_forms() {
        let want = PciAddr {
            domain: 0,
            bus: 0x18,
            device: 0,
            function: 0,
        };
        for s in [
            "00000000:18:00.0",
            "0000:18:00.0",
            "0000:18:00",
            "18:00.0",
            " 00000000:18:00.0 ",
        ] {
            assert_eq!(parse_bus_id(s), Ok(want), "{s}");
        }
        let a = parse_bus_id("0000:b1:00.0").expect("lowercase");
        assert_eq!(a, parse_bus_id("00000000:B1:00.0").expect("uppercase"));
        assert_eq!(a.bus_id(), "00000000:B1:00.0");
        assert_eq!(a.bus_id_legacy(), "0000:B1:00.0");
        assert_eq!(parse_bus_id("00000001:18:00.0").map(|a| a.domain), Ok(1));
    }

    #[test]
    fn rejects_garbage() {
        for s in [
            "",
            "GPU-123",
            "000000000:18:00.0",
            "0000:118:00.0",
            "0000:18:20.0",
            "0000:18:00.8",
            "zz:00.0",
            "::.",
        ] {
            assert!(parse_bus_id(s).is_err(), "{s}");
        }
    }

    #[test]
    fn device_ids() {
        assert_eq!(device_id_for("NVIDIA A100-SXM4-80GB"), 0x20b2_10de);
        assert_eq!(device_id_for("Mystery GPU"), 0);
    }
}
