//! Consistency rules for node profiles.
//!
//! A simulated node is only useful if it could exist: a profile with two GPUs on one minor or a
//! MIG layout the hardware cannot make would let product bugs pass tests. Every rule names the
//! offending field (`gpus[1].uuid`) so a profile author can fix it directly.

use std::collections::HashMap;

use crate::profile::{GpuProfile, NodeProfile};

impl NodeProfile {
    /// Checks the profile's consistency (the rules of this module).
    pub fn validate(&self) -> Result<(), Issue> {
        validate(self)
    }
}

/// One validation failure: the field path and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issue {
    pub field: String,
    pub problem: String,
}

impl std::fmt::Display for Issue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.problem)
    }
}

fn issue(field: impl Into<String>, problem: impl Into<String>) -> Issue {
    Issue {
        field: field.into(),
        problem: problem.into(),
    }
}

/// Architectures NVML knows (`nvmlDeviceGetArchitecture`).
pub const ARCHITECTURES: &[&str] = &[
    "kepler",
    "maxwell",
    "pascal",
    "volta",
    "turing",
    "ampere",
    "ada",
    "hopper",
    "blackwell",
];
/// Brands NVML reports (`nvmlDeviceGetBrand`), spelt as NVIDIA's CUDA images write them in
/// `NVIDIA_REQUIRE_CUDA` constraints (`brand=nvidiartx`, `brand=geforcertx`, ...).
pub const BRANDS: &[&str] = &[
    "unknown",
    "quadro",
    "tesla",
    "nvs",
    "grid",
    "geforce",
    "titan",
    "nvidia",
    "quadrortx",
    "nvidiartx",
    "geforcertx",
    "titanrtx",
];

/// MIG profiles that a GPU model supports, or `None` when it has no MIG (or we do not model it).
pub fn mig_profiles_for(gpu_name: &str) -> Option<&'static [&'static str]> {
    const A100_80GB: &[&str] = &["7g.80gb", "4g.40gb", "3g.40gb", "2g.20gb", "1g.10gb"];
    const H100_80GB: &[&str] = &[
        "7g.80gb", "4g.40gb", "3g.40gb", "2g.20gb", "1g.20gb", "1g.10gb",
    ];
    const H20: &[&str] = &["7g.94gb", "4g.47gb", "3g.47gb", "2g.24gb", "1g.12gb"];
    if gpu_name.contains("A100") && gpu_name.contains("80GB") {
        Some(A100_80GB)
    } else if gpu_name.contains("H100") && gpu_name.contains("80GB") {
        Some(H100_80GB)
    } else if gpu_name == "NVIDIA H20" {
        Some(H20)
    } else {
        None
    }
}

/// Compute slices (the `Ng` of `Ng.XXgb`) of a MIG profile name.
pub fn mig_slices(profile: &str) -> Option<u32> {
    profile.split_once("g.")?.0.parse().ok()
}

/// True for `PREFIX` + 8-4-4-4-12 hex digits (lower case, as NVML prints them).
pub fn is_uuid(s: &str, prefix: &str) -> bool {
    let Some(rest) = s.strip_prefix(prefix) else {
        return false;
    };
    let groups: Vec<&str> = rest.split('-').collect();
    groups.len() == 5
        && groups.iter().zip([8, 4, 4, 4, 12]).all(|(g, n)| {
            g.len() == n
                && g.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        })
}

/// True for NVML's PCI bus id form `%08X:%02X:%02X.%X`.
pub fn is_nvml_bus_id(s: &str) -> bool {
    let hex = |p: &str, n: usize| p.len() == n && p.bytes().all(|b| b.is_ascii_hexdigit());
    let parts: Vec<&str> = s.split(':').collect();
    match parts.as_slice() {
        [domain, bus, devfn] => match devfn.split_once('.') {
            Some((dev, func)) => {
                hex(domain, 8) && hex(bus, 2) && hex(dev, 2) && func.len() == 1 && hex(func, 1)
            }
            None => false,
        },
        _ => false,
    }
}

fn dotted_numbers(s: &str, parts: std::ops::RangeInclusive<usize>) -> bool {
    let fields: Vec<&str> = s.split('.').collect();
    parts.contains(&fields.len())
        && fields
            .iter()
            .all(|f| !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()))
}

/// Records `key` as used by `field`; reports a duplicate naming both fields.
fn unique(
    seen: &mut HashMap<String, String>,
    key: String,
    field: String,
    what: &str,
    shown: &str,
) -> Result<(), Issue> {
    if let Some(first) = seen.get(&key) {
        return Err(issue(
            field,
            format!("duplicate {what} {shown} (already used by {first})"),
        ));
    }
    seen.insert(key, field);
    Ok(())
}

/// Checks every rule; the first failure is returned.
pub fn validate(p: &NodeProfile) -> Result<(), Issue> {
    if p.name.is_empty()
        || !p
            .name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    {
        return Err(issue(
            "name",
            format!("{:?} must be non-empty [A-Za-z0-9._-]", p.name),
        ));
    }
    if !dotted_numbers(&p.driver_version, 2..=3) {
        return Err(issue(
            "driver_version",
            format!(
                "{:?} is not a driver version like 570.158.01",
                p.driver_version
            ),
        ));
    }
    if !dotted_numbers(&p.cuda_driver_version, 2..=2) {
        return Err(issue(
            "cuda_driver_version",
            format!("{:?} is not major.minor like 12.8", p.cuda_driver_version),
        ));
    }
    if !is_lib_dir(&p.lib_dir) {
        return Err(issue(
            "lib_dir",
            format!(
                "{:?} must be an absolute, normalised directory inside the driver root, e.g. /usr/lib/x86_64-linux-gnu or /usr/lib64",
                p.lib_dir
            ),
        ));
    }
    validate_majors(p)?;
    validate_features(p)?;
    if p.gpus.is_empty() {
        return Err(issue(
            "gpus",
            "a node profile needs at least one [[gpus]] entry",
        ));
    }
    let mut seen = HashMap::new();
    for (i, gpu) in p.gpus.iter().enumerate() {
        validate_gpu(i, gpu, &mut seen)?;
    }
    let mut indexes: Vec<u32> = p.gpus.iter().map(|g| g.index).collect();
    indexes.sort_unstable();
    if indexes
        .iter()
        .enumerate()
        .any(|(i, &idx)| idx as usize != i)
    {
        return Err(issue(
            "gpus",
            format!(
                "NVML indexes must be 0..{} without gaps, got {indexes:?}",
                p.gpus.len()
            ),
        ));
    }
    Ok(())
}

/// True for an absolute, normalised directory other than `/`.
pub fn is_lib_dir(dir: &str) -> bool {
    let path = std::path::Path::new(dir);
    path.is_absolute()
        && dir != "/"
        && path.components().all(|c| {
            matches!(
                c,
                std::path::Component::RootDir | std::path::Component::Normal(_)
            )
        })
}

fn validate_majors(p: &NodeProfile) -> Result<(), Issue> {
    let m = &p.majors;
    let mut all = vec![
        ("majors.nvidia_uvm", m.nvidia_uvm),
        ("majors.nvidia_caps", m.nvidia_caps),
    ];
    if let Some(imex) = m.nvidia_caps_imex_channels {
        all.push(("majors.nvidia_caps_imex_channels", imex));
    }
    let mut seen: HashMap<String, String> = HashMap::new();
    for (field, major) in all {
        if major == 0 || major == 195 || major > 4095 {
            return Err(issue(
                field,
                format!(
                    "{major} is not a dynamic char major (1..=4095, not 195 which is nvidia's)"
                ),
            ));
        }
        unique(
            &mut seen,
            major.to_string(),
            field.to_string(),
            "major",
            &major.to_string(),
        )?;
    }
    Ok(())
}

fn validate_gpu(i: usize, g: &GpuProfile, seen: &mut HashMap<String, String>) -> Result<(), Issue> {
    let f = |name: &str| format!("gpus[{i}].{name}");
    unique(
        seen,
        format!("index:{}", g.index),
        f("index"),
        "NVML index",
        &g.index.to_string(),
    )?;
    if g.minor >= 254 {
        return Err(issue(
            f("minor"),
            format!(
                "{} collides with nvidia-modeset (254) / nvidiactl (255)",
                g.minor
            ),
        ));
    }
    unique(
        seen,
        format!("minor:{}", g.minor),
        f("minor"),
        "device minor",
        &g.minor.to_string(),
    )?;
    if !is_uuid(&g.uuid, "GPU-") {
        return Err(issue(
            f("uuid"),
            format!("{:?} is not a GPU UUID like GPU-0b3b1a6c-2d4e-4f60-8a9b-1c2d3e4f5a6b (lower-case hex)", g.uuid),
        ));
    }
    unique(seen, format!("uuid:{}", g.uuid), f("uuid"), "UUID", &g.uuid)?;
    if !is_nvml_bus_id(&g.pci_bus_id) {
        return Err(issue(
            f("pci_bus_id"),
            format!(
                "{:?} is not an NVML PCI bus id like 00000000:07:00.0",
                g.pci_bus_id
            ),
        ));
    }
    let bus = g.pci_bus_id.to_ascii_lowercase();
    unique(
        seen,
        format!("bus:{bus}"),
        f("pci_bus_id"),
        "PCI bus id",
        &g.pci_bus_id,
    )?;
    if g.name.trim().is_empty() {
        return Err(issue(f("name"), "must not be empty"));
    }
    if !ARCHITECTURES.contains(&g.architecture.as_str()) {
        return Err(issue(
            f("architecture"),
            format!("{:?} is not one of {ARCHITECTURES:?}", g.architecture),
        ));
    }
    if !dotted_numbers(&g.compute_capability, 2..=2) {
        return Err(issue(
            f("compute_capability"),
            format!("{:?} is not major.minor like 8.0", g.compute_capability),
        ));
    }
    if !BRANDS.contains(&g.brand.as_str()) {
        return Err(issue(
            f("brand"),
            format!("{:?} is not one of {BRANDS:?}", g.brand),
        ));
    }
    if g.memory_mib == 0 {
        return Err(issue(f("memory_mib"), "must be > 0"));
    }
    validate_mig(i, g, seen)
}

#[path = "validate_mig.rs"]
mod mig;
use mig::validate_mig;

#[path = "validate_features.rs"]
mod features;
use features::validate_features;

#[cfg(test)]
#[path = "validate_tests.rs"]
mod tests;
