//! Generating one CDI spec (`nvidia.com/gpu`) from an inventory.
//!
//! Conventions follow `nvidia-ctk cdi generate` so users' device names keep working: one device per
//! GPU/MIG device and naming strategy (`0`, `0:1`, `GPU-…`, `MIG-…`, `gpu0`, `mig0:1`) holding only
//! that device's nodes, an `all` device, and common edits (control nodes, driver files, env, hooks)
//! built by [`crate::edits`]. The cdiVersion is the minimum the contents need, and the result is
//! validated before it is returned, so a generated spec is always one a runtime accepts.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use gpuhook_node::{Capability, DeviceRef, Inventory};

use crate::edits::{common_edits, EditOptions};
use crate::names::{validate_class, validate_vendor};
use crate::nodes::device_nodes;
use crate::spec::{ContainerEdits, Device, Spec};
use crate::{validate, version, CdiError};

pub const DEFAULT_VENDOR: &str = "nvidia.com";
pub const DEFAULT_CLASS: &str = "gpu";
/// Name of the device that holds every GPU and MIG device.
pub const ALL_DEVICE: &str = "all";

/// How devices are named in the spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NameStrategy {
    /// `0`, MIG `0:1`.
    Index,
    /// `GPU-…`, `MIG-…`.
    Uuid,
    /// `gpu0`, `mig0:1`.
    TypeIndex,
}

impl NameStrategy {
    pub fn as_str(self) -> &'static str {
        match self {
            NameStrategy::Index => "index",
            NameStrategy::Uuid => "uuid",
            NameStrategy::TypeIndex => "type-index",
        }
    }

    /// The name of `dev` under this strategy.
    pub fn name(self, inv: &Inventory, dev: &DeviceRef) -> Result<String, CdiError> {
        let unknown = || CdiError::UnknownDevice {
            device: format!("{dev:?}"),
        };
        Ok(match (self, *dev) {
            (NameStrategy::Index, DeviceRef::Gpu { index }) => index.to_string(),
            (NameStrategy::TypeIndex, DeviceRef::Gpu { index }) => format!("gpu{index}"),
            (NameStrategy::Uuid, DeviceRef::Gpu { index }) => {
                inv.gpu(index).ok_or_else(unknown)?.uuid.clone()
            }
            (
                NameStrategy::Index,
                DeviceRef::Mig {
                    parent_index,
                    index,
                },
            ) => format!("{parent_index}:{index}"),
            (
                NameStrategy::TypeIndex,
                DeviceRef::Mig {
                    parent_index,
                    index,
                },
            ) => {
                format!("mig{parent_index}:{index}")
            }
            (
                NameStrategy::Uuid,
                DeviceRef::Mig {
                    parent_index,
                    index,
                },
            ) => inv
                .gpu(parent_index)
                .and_then(|g| g.mig_devices.iter().find(|m| m.index == index))
                .ok_or_else(unknown)?
                .uuid
                .clone(),
        })
    }
}

impl fmt::Display for NameStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A device name strategy that is not one of [`NameStrategy`]'s.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown device name strategy {0:?} (use index, uuid or type-index)")]
pub struct UnknownStrategy(pub String);

impl FromStr for NameStrategy {
    type Err = UnknownStrategy;
    fn from_str(s: &str) -> Result<Self, UnknownStrategy> {
        match s {
            "index" => Ok(NameStrategy::Index),
            "uuid" => Ok(NameStrategy::Uuid),
            "type-index" => Ok(NameStrategy::TypeIndex),
            other => Err(UnknownStrategy(other.into())),
        }
    }
}

/// Options of [`generate`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenerateOptions {
    pub vendor: String,
    pub class: String,
    /// Applied in order to every device; duplicates are ignored.
    pub name_strategies: Vec<NameStrategy>,
    pub edits: EditOptions,
    /// Emit the `all` device (`nvidia-ctk cdi generate --no-all-device` turns it off).
    pub all_device: bool,
    /// Restrict the spec to these devices (index, `N:M`, UUID, `gpuN`, `migN:M`); `None`: all.
    pub device_ids: Option<Vec<String>>,
}

impl GenerateOptions {
    /// Defaults: `nvidia.com/gpu`, names by index and uuid, the setup hook with NVIDIA's CUDA
    /// forward-compat and application-profile steps.
    pub fn new(gpuhook_path: impl Into<std::path::PathBuf>) -> Self {
        let mut edits = EditOptions::new(gpuhook_path);
        edits.cuda_compat = true;
        edits.application_profile = true;
        GenerateOptions {
            vendor: DEFAULT_VENDOR.into(),
            class: DEFAULT_CLASS.into(),
            name_strategies: vec![NameStrategy::Index, NameStrategy::Uuid],
            edits,
            all_device: true,
            device_ids: None,
        }
    }

    /// `vendor/class`.
    pub fn kind(&self) -> String {
        format!("{}/{}", self.vendor, self.class)
    }
}

/// Why `inv` gives no device, and how to get some.
fn nothing_to_describe(inv: &Inventory) -> String {
    let empty_mig: Vec<String> = inv
        .gpus
        .iter()
        .filter(|g| g.mig_enabled && g.mig_devices.is_empty())
        .map(|g| format!("{} ({})", g.index, g.uuid))
        .collect();
    if inv.gpus.is_empty() {
        "no GPU found (is the NVIDIA driver loaded?)".into()
    } else if empty_mig.len() == inv.gpus.len() {
        format!(
            "MIG mode is on without MIG devices on GPU {}; create MIG instances \
             (`nvidia-smi mig -cgi <profiles> -C`) or disable MIG mode (`nvidia-smi -i <index> -mig 0`)",
            gpuhook_node::bounded::preview_list(&empty_mig, 8)
        )
    } else {
        "no GPU or MIG device matches the selection".into()
    }
}

/// Every injectable device, GPUs by index each followed by nothing (a whole GPU) or its MIG
/// devices (a MIG-enabled GPU is not a whole device, like the toolkit's `all`).
pub fn all_devices(inv: &Inventory) -> Vec<DeviceRef> {
    let mut gpus: Vec<_> = inv.gpus.iter().collect();
    gpus.sort_by_key(|g| g.index);
    let mut out = Vec::new();
    for gpu in gpus {
        if gpu.mig_enabled {
            if gpu.mig_devices.is_empty() {
                tracing::warn!(gpu = gpu.index, uuid = %gpu.uuid, "MIG-enabled GPU has no MIG devices; it gets no CDI device");
            }
            let mut migs: Vec<_> = gpu.mig_devices.iter().map(|m| m.index).collect();
            migs.sort_unstable();
            out.extend(migs.into_iter().map(|index| DeviceRef::Mig {
                parent_index: gpu.index,
                index,
            }));
        } else {
            out.push(DeviceRef::Gpu { index: gpu.index });
        }
    }
    out
}

/// The devices of `all` that `ids` name (any strategy's name; `all` names every one), in
/// `all`'s order; every id must name one (`nvidia-ctk cdi generate --device-id`).
fn select(
    inv: &Inventory,
    all: Vec<DeviceRef>,
    ids: Option<&[String]>,
) -> Result<Vec<DeviceRef>, CdiError> {
    let Some(ids) = ids.filter(|ids| !ids.iter().any(|i| i == ALL_DEVICE)) else {
        return Ok(all);
    };
    const STRATEGIES: [NameStrategy; 3] = [
        NameStrategy::Index,
        NameStrategy::Uuid,
        NameStrategy::TypeIndex,
    ];
    let named = |dev: &DeviceRef, id: &str| {
        STRATEGIES
            .iter()
            .any(|s| s.name(inv, dev).is_ok_and(|n| n.eq_ignore_ascii_case(id)))
    };
    if let Some(bad) = ids.iter().find(|id| !all.iter().any(|d| named(d, id))) {
        let known: Vec<String> = all
            .iter()
            .filter_map(|d| NameStrategy::Index.name(inv, d).ok())
            .collect();
        return Err(CdiError::InvalidOption {
            option: "device id",
            message: format!(
                "{} names no device of this node (devices: {}, their UUIDs, or all)",
                crate::error::capped(bad),
                known.join(", ")
            ),
        });
    }
    Ok(all
        .into_iter()
        .filter(|d| ids.iter().any(|id| named(d, id)))
        .collect())
}

/// Builds the spec of kind `vendor/class` for `inv`. The result passes [`validate::validate_spec`]
/// (checked with [`validate::validate_model`]: the schema part in debug builds).
pub fn generate(inv: &Inventory, opts: &GenerateOptions) -> Result<Spec, CdiError> {
    let bad = |option, message| CdiError::InvalidOption { option, message };
    validate_vendor(&opts.vendor).map_err(|m| bad("vendor", m.to_string()))?;
    validate_class(&opts.class).map_err(|m| bad("class", m.to_string()))?;
    let mut strategies: Vec<NameStrategy> = Vec::new();
    for s in &opts.name_strategies {
        if !strategies.contains(s) {
            strategies.push(*s);
        }
    }
    if strategies.is_empty() {
        return Err(bad(
            "device name strategy",
            "at least one is needed (index, uuid, type-index)".into(),
        ));
    }
    let all = select(inv, all_devices(inv), opts.device_ids.as_deref())?;
    if all.is_empty() {
        return Err(CdiError::NothingToDescribe {
            reason: nothing_to_describe(inv),
        });
    }
    let mut devices = Vec::new();
    let mut seen = BTreeSet::new();
    for dev in &all {
        let nodes = device_nodes(inv, std::slice::from_ref(dev))?;
        for s in &strategies {
            let name = s.name(inv, dev)?;
            if !seen.insert(name.clone()) {
                return Err(bad(
                    "device name strategy",
                    format!("two devices would be named {name:?}"),
                ));
            }
            devices.push(Device {
                name,
                annotations: Default::default(),
                container_edits: ContainerEdits {
                    device_nodes: nodes.clone(),
                    ..Default::default()
                },
            });
        }
    }
    if opts.all_device {
        devices.push(Device {
            name: crate::generate::ALL_DEVICE.into(),
            annotations: Default::default(),
            container_edits: ContainerEdits {
                device_nodes: device_nodes(inv, &all)?,
                ..Default::default()
            },
        });
    }
    let caps: BTreeSet<Capability> = Capability::ALL.into_iter().collect();
    let common = common_edits(inv, &caps, &opts.edits)?;
    finish_spec(opts.kind(), devices, common)
}

/// The spec of `kind` with these devices and common edits, at the minimum `cdiVersion` its
/// contents need, validated: every generator mode ends here.
pub(crate) fn finish_spec(
    kind: String,
    devices: Vec<Device>,
    container_edits: ContainerEdits,
) -> Result<Spec, CdiError> {
    let mut spec = Spec {
        cdi_version: String::new(),
        kind,
        annotations: Default::default(),
        devices,
        container_edits,
    };
    spec.cdi_version = version::minimum_version(&spec).to_string();
    validate::validate_model(&spec).map_err(|errors| CdiError::Invalid { errors })?;
    Ok(spec)
}

#[cfg(test)]
#[path = "generate_tests.rs"]
mod tests;
