//! The NVIDIA kernel module's `/proc` files, read under the driver root.
//!
//! They are the ground truth for device numbers (majors of the dynamic devices, MIG capability
//! minors) and let discovery find full GPUs when NVML cannot be loaded. Parsing is split from
//! reading so every format is unit-tested on text; readers take the root so a simulated node and a
//! real one (root `/`) go through the same code.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::bounded::{read_bounded_string, MAX_PROC_BYTES};
use crate::error::NodeError;
use crate::inventory::{join_under, DeviceMajors, MigControlCaps};

pub const PROC_DEVICES: &str = "/proc/devices";
pub const PROC_VERSION: &str = "/proc/driver/nvidia/version";
pub const PROC_GPUS: &str = "/proc/driver/nvidia/gpus";
pub const PROC_MIG_MINORS: &str = "/proc/driver/nvidia-caps/mig-minors";
pub const PROC_CAPABILITIES: &str = "/proc/driver/nvidia/capabilities";

/// Majors from the `Character devices:` section of `/proc/devices`; `None` without an `nvidia`
/// (or, on older drivers, `nvidia-frontend`) entry.
pub fn parse_proc_devices(text: &str) -> Option<DeviceMajors> {
    let mut majors: HashMap<&str, u32> = HashMap::new();
    let mut in_char = false;
    for line in text.lines() {
        let line = line.trim();
        if line.ends_with(':') {
            in_char = line == "Character devices:";
            continue;
        }
        if !in_char {
            continue;
        }
        let mut it = line.split_whitespace();
        if let (Some(num), Some(name)) = (it.next(), it.next()) {
            if let Ok(num) = num.parse() {
                majors.entry(name).or_insert(num);
            }
        }
    }
    let nvidia = majors
        .get("nvidia")
        .or_else(|| majors.get("nvidia-frontend"))
        .copied()?;
    Some(DeviceMajors {
        nvidia,
        nvidia_uvm: majors.get("nvidia-uvm").copied(),
        nvidia_caps: majors.get("nvidia-caps").copied(),
        nvidia_caps_imex_channels: majors.get("nvidia-caps-imex-channels").copied(),
    })
}

/// The driver version from `/proc/driver/nvidia/version`'s first line
/// (`NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.158.01  Sun ...`).
pub fn parse_driver_version(text: &str) -> Option<String> {
    let line = text.lines().next()?;
    let rest = line.split_once("Module").map_or(line, |(_, r)| r);
    rest.split_whitespace()
        .find(|t| is_version(t))
        .map(str::to_string)
}

/// `570.158.01`, `535.54`: dot-separated decimal numbers, at least two.
pub fn is_version(s: &str) -> bool {
    let parts: Vec<&str> = s.split('.').collect();
    parts.len() >= 2
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// One `/proc/driver/nvidia/gpus/<bus>/information` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcGpu {
    pub model: String,
    pub uuid: String,
    /// NVML form, `00000000:07:00.0`.
    pub pci_bus_id: String,
    pub minor: u32,
}

/// Parses an `information` file; `None` when `GPU UUID`, `Bus Location` or `Device Minor` is missing.
pub fn parse_gpu_information(text: &str) -> Option<ProcGpu> {
    let mut fields: HashMap<&str, &str> = HashMap::new();
    for line in text.lines() {
        if let Some((k, v)) = line.split_once(':') {
            fields.entry(k.trim()).or_insert(v.trim());
        }
    }
    Some(ProcGpu {
        model: fields.get("Model").unwrap_or(&"").to_string(),
        uuid: fields.get("GPU UUID")?.to_string(),
        pci_bus_id: normalize_bus_id(fields.get("Bus Location")?)?,
        minor: fields.get("Device Minor")?.parse().ok()?,
    })
}

/// `0000:07:00.0` or `00000000:07:00.0` -> `00000000:07:00.0` (lower case).
pub fn normalize_bus_id(s: &str) -> Option<String> {
    let (domain, rest) = s.trim().split_once(':')?;
    let domain = u32::from_str_radix(domain, 16).ok()?;
    Some(format!("{domain:08x}:{}", rest.to_ascii_lowercase()))
}

/// `/proc/driver/nvidia-caps/mig-minors`: capability name -> minor.
///
/// The driver lists every capability it could ever create (over a thousand lines for 8 GPUs,
/// MIG or not), and discovery reads it on every `cdi generate`: names are kept as numbers in one
/// sorted vector, not as a thousand strings in a hash map.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MigMinors(Vec<(MigCapName, u32)>);

/// A capability of `mig-minors`: `config`, `monitor`, or the GPU instance `gpu<minor>/gi<g>/access`
/// (compute instance `None`) or compute instance `gpu<minor>/gi<g>/ci<c>/access`. Ordered as the
/// driver lists them (a GI before its CIs), so sorting the file's lines finds them sorted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum MigCapName {
    Config,
    Monitor,
    Instance(u32, u32, Option<u32>),
}

impl MigCapName {
    /// `config`, `monitor`, `gpu<N>/gi<G>/access` or `gpu<N>/gi<G>/ci<C>/access`, read byte by
    /// byte: a thousand lines on every `cdi generate`, so no substring searcher per line.
    fn parse(name: &str) -> Option<MigCapName> {
        match name {
            "config" => return Some(MigCapName::Config),
            "monitor" => return Some(MigCapName::Monitor),
            _ => {}
        }
        let b = name.as_bytes();
        let (gpu, b) = number_after(b, b"gpu")?;
        let (gi, b) = number_after(b, b"/gi")?;
        if b == b"/access" {
            return Some(MigCapName::Instance(gpu, gi, None));
        }
        let (ci, b) = number_after(b, b"/ci")?;
        (b == b"/access").then_some(MigCapName::Instance(gpu, gi, Some(ci)))
    }
}

/// The decimal number right after `prefix` at the start of `b`, and the bytes after it.
fn number_after<'a>(b: &'a [u8], prefix: &[u8]) -> Option<(u32, &'a [u8])> {
    let rest = b.strip_prefix(prefix)?;
    let digits = rest.iter().take_while(|c| c.is_ascii_digit()).count();
    if digits == 0 || digits > 9 {
        return None;
    }
    let n = rest[..digits]
        .iter()
        .fold(0u32, |n, d| n * 10 + u32::from(d - b'0'));
    Some((n, &rest[digits..]))
}

impl MigMinors {
    pub fn parse(text: &str) -> MigMinors {
        let mut caps: Vec<(MigCapName, u32)> = text
            .lines()
            .filter_map(|l| {
                let mut words = l.split_ascii_whitespace();
                let (name, minor, extra) = (words.next()?, words.next()?, words.next());
                if extra.is_some() {
                    return None;
                }
                Some((MigCapName::parse(name)?, minor.parse().ok()?))
            })
            .collect();
        // Stable, so the first of two lines for one name wins, as a first-match lookup would.
        caps.sort_by_key(|(name, _)| *name);
        caps.dedup_by_key(|(name, _)| *name);
        MigMinors(caps)
    }

    fn minor(&self, name: MigCapName) -> Option<u32> {
        let i = self.0.binary_search_by_key(&name, |(n, _)| *n).ok()?;
        Some(self.0[i].1)
    }

    /// Minor of a capability by its `mig-minors` name (`config`, `gpu0/gi1/ci0/access`).
    pub fn get(&self, name: &str) -> Option<u32> {
        self.minor(MigCapName::parse(name)?)
    }

    /// Minor of a GPU instance; `gpu_minor` is the parent's `/dev/nvidia<minor>`, not its index.
    pub fn gi(&self, gpu_minor: u32, gi: u32) -> Option<u32> {
        self.minor(MigCapName::Instance(gpu_minor, gi, None))
    }

    /// Minor of a compute instance.
    pub fn ci(&self, gpu_minor: u32, gi: u32, ci: u32) -> Option<u32> {
        self.minor(MigCapName::Instance(gpu_minor, gi, Some(ci)))
    }

    pub fn control(&self) -> Option<MigControlCaps> {
        Some(MigControlCaps {
            config_minor: self.minor(MigCapName::Config)?,
            monitor_minor: self.minor(MigCapName::Monitor)?,
        })
    }
}

/// `DeviceFileMinor: N` of a capability `access` file.
pub fn parse_device_file_minor(text: &str) -> Option<u32> {
    text.lines().find_map(|l| {
        l.trim()
            .strip_prefix("DeviceFileMinor:")?
            .trim()
            .parse()
            .ok()
    })
}

/// Reads the driver's `/proc` files under a driver root.
#[derive(Debug, Clone)]
pub struct ProcFs {
    root: PathBuf,
}

impl ProcFs {
    pub fn new(driver_root: &Path) -> Self {
        ProcFs {
            root: driver_root.to_path_buf(),
        }
    }

    /// Host path of a `/proc/...` path.
    pub fn path(&self, p: &str) -> PathBuf {
        join_under(&self.root, Path::new(p))
    }

    /// Whether `/proc/driver/nvidia` exists (the kernel module is loaded).
    pub fn has_driver(&self) -> bool {
        self.path("/proc/driver/nvidia").is_dir()
    }

    fn read_optional(&self, p: &str) -> Result<Option<String>, NodeError> {
        let path = self.path(p);
        match read_bounded_string(&path, MAX_PROC_BYTES).map_err(NodeError::from) {
            Ok(s) => Ok(Some(s)),
            Err(NodeError::Io { error, .. }) if error.kind() == std::io::ErrorKind::NotFound => {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Majors from `/proc/devices`; `Ok(None)` when the file or its `nvidia` entry is missing.
    pub fn majors(&self) -> Result<Option<DeviceMajors>, NodeError> {
        Ok(self
            .read_optional(PROC_DEVICES)?
            .as_deref()
            .and_then(parse_proc_devices))
    }

    /// Driver version from `/proc/driver/nvidia/version`, when present.
    pub fn driver_version(&self) -> Result<Option<String>, NodeError> {
        Ok(self
            .read_optional(PROC_VERSION)?
            .as_deref()
            .and_then(parse_driver_version))
    }

    /// Every GPU of `/proc/driver/nvidia/gpus/*/information`, sorted by PCI bus id.
    pub fn gpus(&self) -> Result<Vec<ProcGpu>, NodeError> {
        let dir = self.path(PROC_GPUS);
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(NodeError::io(dir, e)),
        };
        let mut gpus = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| NodeError::io(&dir, e))?;
            let path = entry.path().join("information");
            let text = read_bounded_string(&path, MAX_PROC_BYTES)?;
            let gpu = parse_gpu_information(&text).ok_or_else(|| NodeError::Procfs {
                path: path.clone(),
                reason: "missing `GPU UUID`, `Bus Location` or `Device Minor`".into(),
            })?;
            gpus.push(gpu);
        }
        gpus.sort_by(|a, b| a.pci_bus_id.cmp(&b.pci_bus_id));
        Ok(gpus)
    }

    /// `/proc/driver/nvidia-caps/mig-minors`, when present.
    pub fn mig_minors(&self) -> Result<Option<MigMinors>, NodeError> {
        Ok(self
            .read_optional(PROC_MIG_MINORS)?
            .as_deref()
            .map(MigMinors::parse))
    }

    /// `DeviceFileMinor` of `/proc/driver/nvidia/capabilities/<rel>` (e.g. `gpu0/mig/gi1/access`).
    pub fn capability_minor(&self, rel: &str) -> Result<Option<u32>, NodeError> {
        let p = format!("{PROC_CAPABILITIES}/{rel}");
        Ok(self
            .read_optional(&p)?
            .as_deref()
            .and_then(parse_device_file_minor))
    }

    /// In-root path of a MIG `access` file (mounted read-only into containers by some runtimes).
    pub fn mig_access_file(gpu_minor: u32, gi: u32, ci: Option<u32>) -> String {
        match ci {
            Some(ci) => format!("{PROC_CAPABILITIES}/gpu{gpu_minor}/mig/gi{gi}/ci{ci}/access"),
            None => format!("{PROC_CAPABILITIES}/gpu{gpu_minor}/mig/gi{gi}/access"),
        }
    }
}

#[cfg(test)]
#[path = "procfs_tests.rs"]
mod tests;
