//! The device table: the profile turned into NVML's view of the node.
//!
//! The table is built once, leaked, and never mutated, so an `nvmlDevice_t` can be the address of
//! one of its entries and stays valid across `nvmlShutdown`/`nvmlInit` cycles exactly like a real
//! NVML handle. A handle from a caller is only ever *compared* against the entries' addresses
//! ([`Table::resolve`]); it is never dereferenced, so a stale or forged pointer yields
//! `NVML_ERROR_INVALID_ARGUMENT` instead of undefined behaviour.

use std::os::raw::{c_int, c_uint};
use std::path::PathBuf;

use gpuhook_sim::profile::{GpuProfile, MigDeviceProfile, NodeProfile};

use crate::error::TableError;
use crate::ffi::{self, NvmlDevice, NvmlReturn};
use crate::instances::{gi_profiles, gpu_instances, GiProfile, GpuInstance};
use crate::pci::{self, PciAddr};

const MIB: u64 = 1024 * 1024;

/// The whole simulated node as NVML reports it.
#[derive(Debug)]
pub struct Table {
    /// Directory that holds the library and the profile (state files go below it).
    pub dir: PathBuf,
    pub driver_version: String,
    /// `nvmlSystemGetCudaDriverVersion` value, e.g. 12080 for CUDA 12.8.
    pub cuda_version: c_int,
    /// `<cuda major>.<driver version>`, what `nvmlSystemGetNVMLVersion` returns.
    pub nvml_version: String,
    /// GPUs in NVML index order.
    pub gpus: Vec<Gpu>,
    /// MIG write support (`mig_overlay`): the driver root, the `nvidia-caps` major, the table
    /// this one replaced (its handles stay valid) and the state generation it was built from.
    pub mig: crate::mig_overlay::TableMig,
}

/// A physical GPU.
#[derive(Debug)]
pub struct Gpu {
    pub index: c_uint,
    pub minor: c_uint,
    pub uuid: String,
    pub name: String,
    pub pci: PciAddr,
    /// `(device id << 16) | 0x10de`, 0 when the model is not in our table.
    pub pci_device_id: c_uint,
    pub memory_bytes: u64,
    pub brand: c_uint,
    pub arch: c_uint,
    pub cc: (c_int, c_int),
    /// The model supports MIG at all (else MIG queries are `NOT_SUPPORTED`).
    pub mig_capable: bool,
    pub mig_enabled: bool,
    /// `nvmlDeviceGetMaxMigDeviceCount` while MIG is enabled.
    pub max_mig: c_uint,
    /// MIG devices in NVML's enumeration order.
    pub migs: Vec<Mig>,
    /// GPU instance profiles of the model (empty without MIG support).
    pub profiles: Vec<GiProfile>,
    /// GPU instances (with their compute instances) behind `migs`, in id order.
    pub gis: Vec<GpuInstance>,
    /// NUMA node of the PCI device, when the profile names one.
    pub numa_node: Option<c_uint>,
    /// Active NVLinks to the NVSwitch fabric (0: PCIe only).
    pub nvlinks: c_uint,
    /// The MIG mode a pending change will bring (see `mig_overlay`).
    pub mig_pending: Option<bool>,
}

/// A MIG device (GPU instance + compute instance) of a GPU.
#[derive(Debug)]
pub struct Mig {
    pub gi: c_uint,
    pub ci: c_uint,
    pub uuid: String,
    /// `<parent name> MIG <profile>`, as the real driver names it.
    pub name: String,
    pub memory_bytes: u64,
}

/// A resolved handle.
#[derive(Debug, Clone, Copy)]
pub enum Dev<'a> {
    Gpu(&'a Gpu),
    Mig(&'a Gpu, &'a Mig),
}

impl<'a> Dev<'a> {
    /// The physical GPU (the parent of a MIG device).
    pub fn gpu(self) -> &'a Gpu {
        match self {
            Dev::Gpu(g) | Dev::Mig(g, _) => g,
        }
    }

    /// The full GPU, or `NOT_SUPPORTED` for a MIG handle (queries that only make sense for one).
    pub fn whole_gpu(self) -> Result<&'a Gpu, NvmlReturn> {
        match self {
            Dev::Gpu(g) => Ok(g),
            Dev::Mig(..) => Err(ffi::NVML_ERROR_NOT_SUPPORTED),
        }
    }

    /// The MIG device, or `NOT_SUPPORTED` for a full GPU.
    pub fn mig(self) -> Result<(&'a Gpu, &'a Mig), NvmlReturn> {
        match self {
            Dev::Mig(g, m) => Ok((g, m)),
            Dev::Gpu(_) => Err(ffi::NVML_ERROR_NOT_SUPPORTED),
        }
    }

    pub fn uuid(self) -> &'a str {
        match self {
            Dev::Gpu(g) => &g.uuid,
            Dev::Mig(_, m) => &m.uuid,
        }
    }

    pub fn name(self) -> &'a str {
        match self {
            Dev::Gpu(g) => &g.name,
            Dev::Mig(_, m) => &m.name,
        }
    }

    pub fn memory_bytes(self) -> u64 {
        match self {
            Dev::Gpu(g) => g.memory_bytes,
            Dev::Mig(_, m) => m.memory_bytes,
        }
    }
}

/// The opaque handle of a table entry.
pub fn handle_of<T>(entry: &T) -> NvmlDevice {
    (entry as *const T).cast_mut().cast()
}

impl Table {
    /// Maps a caller's handle to the entry it names, comparing addresses only.
    pub fn resolve(&self, handle: NvmlDevice) -> Result<Dev<'_>, NvmlReturn> {
        if handle.is_null() {
            return Err(ffi::NVML_ERROR_INVALID_ARGUMENT);
        }
        for gpu in &self.gpus {
            if handle_of(gpu) == handle {
                return Ok(Dev::Gpu(gpu));
            }
            if let Some(mig) = gpu.migs.iter().find(|m| handle_of(*m) == handle) {
                return Ok(Dev::Mig(gpu, mig));
            }
        }
        // A handle from before a MIG write: the same GPU or MIG device in this table.
        match self.translate(handle.cast()) {
            Some(h) if h != handle.cast() => self.resolve(h.cast()),
            _ => Err(ffi::NVML_ERROR_INVALID_ARGUMENT),
        }
    }

    /// Finds a GPU or MIG device by its exact UUID.
    pub fn by_uuid(&self, uuid: &str) -> Option<NvmlDevice> {
        self.gpus.iter().find_map(|g| {
            if g.uuid == uuid {
                Some(handle_of(g))
            } else {
                g.migs.iter().find(|m| m.uuid == uuid).map(handle_of)
            }
        })
    }

    /// Builds the table from a parsed profile, rejecting what NVML could never report.
    pub fn from_profile(profile: &NodeProfile, dir: PathBuf) -> Result<Table, TableError> {
        let cuda_version = parse_cuda_version(&profile.cuda_driver_version)?;
        let mut gpus = profile
            .gpus
            .iter()
            .map(gpu_from_profile)
            .collect::<Result<Vec<_>, _>>()?;
        gpus.sort_by_key(|g| g.index);
        for (pos, gpu) in gpus.iter().enumerate() {
            if gpu.index as usize != pos {
                return Err(TableError::GpuIndexes {
                    count: gpus.len(),
                    index: gpu.index,
                    position: pos,
                });
            }
        }
        let mut uuids: Vec<&str> = gpus
            .iter()
            .flat_map(|g| {
                std::iter::once(g.uuid.as_str()).chain(g.migs.iter().map(|m| m.uuid.as_str()))
            })
            .collect();
        uuids.sort_unstable();
        if let Some(w) = uuids.windows(2).find(|w| w[0] == w[1]) {
            return Err(TableError::DuplicateUuid(w[0].to_string()));
        }
        Ok(Table {
            driver_version: profile.driver_version.clone(),
            cuda_version,
            nvml_version: format!("{}.{}", cuda_version / 1000, profile.driver_version),
            mig: crate::mig_overlay::TableMig::new(profile, &dir),
            dir,
            gpus,
        })
    }
}

fn gpu_from_profile(p: &GpuProfile) -> Result<Gpu, TableError> {
    let ctx = |error: TableError| TableError::Gpu {
        index: p.index,
        uuid: p.uuid.clone(),
        error: Box::new(error),
    };
    check_uuid(&p.uuid, "GPU-").map_err(ctx)?;
    let pci = pci::parse_bus_id(&p.pci_bus_id).map_err(ctx)?;
    let arch = parse_arch(&p.architecture).map_err(ctx)?;
    let brand = parse_brand(&p.brand).map_err(ctx)?;
    let cc = parse_compute_capability(&p.compute_capability).map_err(ctx)?;
    if !p.mig_mode && !p.mig_devices.is_empty() {
        return Err(ctx(TableError::MigDevicesWithoutMigMode));
    }
    let migs = p
        .mig_devices
        .iter()
        .map(|m| mig_from_profile(p, m))
        .collect::<Result<Vec<_>, _>>()
        .map_err(ctx)?;
    if p.nvlinks > ffi::NVLINK_MAX_LINKS {
        return Err(ctx(TableError::TooManyNvlinks(p.nvlinks)));
    }
    let mig_capable = p.mig_mode || model_supports_mig(&p.name, arch);
    // A30 has 4 MIG slices, every other MIG-capable model 7.
    let slices = if p.name.contains("A30") { 4 } else { 7 };
    let profiles = if mig_capable {
        gi_profiles(p)
    } else {
        Vec::new()
    };
    let gis = gpu_instances(p, &profiles);
    Ok(Gpu {
        index: p.index,
        minor: p.minor,
        uuid: p.uuid.clone(),
        name: p.name.clone(),
        pci,
        pci_device_id: pci::device_id_for(&p.name),
        memory_bytes: p.memory_mib * MIB,
        brand,
        arch,
        cc,
        mig_capable,
        mig_enabled: p.mig_mode,
        max_mig: slices.max(c_uint::try_from(migs.len()).unwrap_or(c_uint::MAX)),
        migs,
        profiles,
        gis,
        numa_node: p.numa_node,
        nvlinks: p.nvlinks,
        mig_pending: None,
    })
}

fn mig_from_profile(gpu: &GpuProfile, m: &MigDeviceProfile) -> Result<Mig, TableError> {
    check_uuid(&m.uuid, "MIG-").map_err(|e| TableError::Mig {
        uuid: m.uuid.clone(),
        error: Box::new(e),
    })?;
    Ok(Mig {
        gi: m.gi_id,
        ci: m.ci_id,
        uuid: m.uuid.clone(),
        name: format!("{} MIG {}", gpu.name, m.profile),
        memory_bytes: m.memory_mib * MIB,
    })
}

/// MIG exists on A100/A30/A800 (Ampere), every Hopper data-centre part, and B100/B200/GB200.
fn model_supports_mig(name: &str, arch: c_uint) -> bool {
    match arch {
        ffi::NVML_DEVICE_ARCH_AMPERE => ["A100", "A30", "A800"].iter().any(|m| name.contains(m)),
        ffi::NVML_DEVICE_ARCH_HOPPER => true,
        ffi::NVML_DEVICE_ARCH_BLACKWELL => ["B100", "B200", "B300", "RTX PRO 6000"]
            .iter()
            .any(|m| name.contains(m)),
        _ => false,
    }
}

/// UUIDs become file names (compute-mode state), so only `[A-Za-z0-9-]` is allowed.
fn check_uuid(uuid: &str, prefix: &'static str) -> Result<(), TableError> {
    let ok = uuid.starts_with(prefix)
        && uuid.len() > prefix.len()
        && uuid.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(TableError::Uuid {
            uuid: uuid.to_string(),
            prefix,
        })
    }
}

/// `"12.8"` -> 12080, NVML's `1000 * major + 10 * minor`.
pub fn parse_cuda_version(v: &str) -> Result<c_int, TableError> {
    let err = || TableError::CudaVersion(v.to_string());
    let (major, minor) = v.trim().split_once('.').ok_or_else(err)?;
    let major: c_int = major.parse().map_err(|_| err())?;
    let minor: c_int = minor.parse().map_err(|_| err())?;
    if !(1..=99).contains(&major) || !(0..=99).contains(&minor) {
        return Err(err());
    }
    Ok(major * 1000 + minor * 10)
}

/// `"8.0"` -> (8, 0).
pub fn parse_compute_capability(v: &str) -> Result<(c_int, c_int), TableError> {
    let err = || TableError::ComputeCapability(v.to_string());
    let (major, minor) = v.trim().split_once('.').ok_or_else(err)?;
    Ok((
        major.parse().map_err(|_| err())?,
        minor.parse().map_err(|_| err())?,
    ))
}

/// Architecture name (case-insensitive) -> `nvmlDeviceArchitecture_t`.
pub fn parse_arch(v: &str) -> Result<c_uint, TableError> {
    let norm: String = v
        .to_ascii_lowercase()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .collect();
    Ok(match norm.as_str() {
        "kepler" => ffi::NVML_DEVICE_ARCH_KEPLER,
        "maxwell" => ffi::NVML_DEVICE_ARCH_MAXWELL,
        "pascal" => ffi::NVML_DEVICE_ARCH_PASCAL,
        "volta" => ffi::NVML_DEVICE_ARCH_VOLTA,
        "turing" => ffi::NVML_DEVICE_ARCH_TURING,
        "ampere" => ffi::NVML_DEVICE_ARCH_AMPERE,
        "ada" | "adalovelace" => ffi::NVML_DEVICE_ARCH_ADA,
        "hopper" => ffi::NVML_DEVICE_ARCH_HOPPER,
        "blackwell" => ffi::NVML_DEVICE_ARCH_BLACKWELL,
        "t23x" | "orin" => ffi::NVML_DEVICE_ARCH_T23X,
        _ => return Err(TableError::Arch(v.to_string())),
    })
}

/// Brand name (case-insensitive, `-`/space = `_`) -> `nvmlBrandType_t`.
pub fn parse_brand(v: &str) -> Result<c_uint, TableError> {
    // `nvidia_rtx`, `nvidia-rtx` and `nvidiartx` (the NVIDIA_REQUIRE_CUDA spelling) are one brand.
    let norm = v.trim().to_ascii_lowercase().replace(['-', ' ', '_'], "");
    ffi::BRANDS
        .iter()
        .find(|(n, _)| n.replace('_', "") == norm)
        .map(|(_, b)| *b)
        .ok_or_else(|| TableError::Brand(v.to_string()))
}

#[cfg(test)]
#[path = "table_tests.rs"]
mod tests;
