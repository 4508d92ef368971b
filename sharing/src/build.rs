//! [`advertise`]: a config and a node's inventory in, the [`Advertisement`] out.
//!
//! Replication follows what NVIDIA's running plugin does, not only what its parser keeps:
//! the plugin, GFD and the MPS daemon call `DisableResourceNamingInConfig`
//! (`api/config/v1/config.go`), which forces every shared resource to `devices: all` and its
//! `rename` to `""`, or to `<name>.shared` under `renameByDefault`. So a ConfigMap gives the
//! same resource names under our plugin as under NVIDIA's; the discarded settings are warnings.
//! One exception: an MPS resource's `devices` list is honoured by gpu-mps-daemon, and only GPUs
//! whose daemon is ready are advertised, so the list does select the GPUs (a warning says so).

use std::collections::BTreeMap;

use gpuhook_node::topology::read_numa_node;
use gpuhook_node::Inventory;

use crate::advertise::{
    AdvertiseError, AdvertisedDevice, Advertisement, DeviceIdStrategy, DeviceListStrategy,
    Resource, SharingKind,
};
use crate::config::{full_resource_name, Config, Devices, ReplicatedResources};
use crate::model::{base_devices, BaseDevice};

/// Default `flags.plugin.cdiAnnotationPrefix`.
pub const DEFAULT_CDI_ANNOTATION_PREFIX: &str = "cdi.k8s.io/";

/// What this node advertises under `config` (named `name`). `mps_ready(gpu_uuid)`: a GPU's MPS
/// replicas are advertised only while its MPS daemon is ready.
pub fn advertise(
    name: &str,
    config: &Config,
    inventory: &Inventory,
    mps_ready: &dyn Fn(&str) -> bool,
) -> Result<Advertisement, AdvertiseError> {
    let (ad, warnings) = advertise_with_warnings(name, config, inventory, mps_ready)?;
    for w in &warnings {
        tracing::warn!(config = name, warning = %w, "device-plugin config");
    }
    Ok(ad)
}

/// [`advertise`], returning the config's warnings (ignored keys, discarded settings) too.
pub fn advertise_with_warnings(
    name: &str,
    config: &Config,
    inventory: &Inventory,
    mps_ready: &dyn Fn(&str) -> bool,
) -> Result<(Advertisement, Vec<String>), AdvertiseError> {
    let plugin = &config.flags.plugin;
    let ids = plugin.device_id_strategy.unwrap_or(DeviceIdStrategy::Uuid);
    let mig = config.flags.mig_strategy.unwrap_or_default();
    let base = base_devices(inventory, mig, ids)?;
    let mut warnings = config.warnings.clone();
    if config.resources.as_ref().is_some_and(|r| !r.is_null()) {
        warnings.push("resources: ignored, resources keep NVIDIA's default names (as NVIDIA's plugin ignores the section)".to_string());
    }
    let replicated = config.sharing.replicated();
    if let Some((section, _)) = replicated {
        warnings.extend(discarded_settings(section, config.sharing.mps.is_some()));
    }
    let mut resources = replicate(&base, replicated, mps_ready)?;
    set_numa_nodes(&mut resources, inventory);
    let labels = crate::labels::node_labels(config, inventory, &base);
    let ad = Advertisement {
        config_name: name.to_string(),
        resources,
        labels,
        device_list_strategies: plugin
            .device_list_strategy
            .clone()
            .filter(|l| !l.is_empty())
            .unwrap_or_else(|| vec![DeviceListStrategy::Envvar]),
        device_id_strategy: ids,
        pass_device_specs: plugin.pass_device_specs.unwrap_or(false),
        cdi_annotation_prefix: plugin
            .cdi_annotation_prefix
            .clone()
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| DEFAULT_CDI_ANNOTATION_PREFIX.to_string()),
        mps_root: config.flags.mps_root.clone().filter(|r| !r.is_empty()),
    };
    Ok((ad, warnings))
}

/// Every device and replica carries its GPU's NUMA node (a MIG device its parent's), as NVIDIA's
/// plugin reads it (`internal/rm/nvml_devices.go:nvmlDevice.GetNumaNode`:
/// `/sys/bus/pci/devices/<bus>/numa_node`, -1 or absent: none) for the TopologyInfo of each
/// device (`devices.go`). Read under the driver root, like the topology behind
/// GetPreferredAllocation (the host's `/sys` on a real node).
fn set_numa_nodes(resources: &mut [Resource], inventory: &Inventory) {
    let numa: BTreeMap<&str, Option<u32>> = inventory
        .gpus
        .iter()
        .map(|g| {
            let node = read_numa_node(&inventory.driver_root, &g.pci_bus_id);
            (g.uuid.as_str(), node)
        })
        .collect();
    for d in resources.iter_mut().flat_map(|r| r.devices.iter_mut()) {
        d.numa_node = numa.get(d.backing.gpu_uuid.as_str()).copied().flatten();
    }
}

/// The `devices` and explicit `rename` settings NVIDIA's running plugin discards.
fn discarded_settings(section: &ReplicatedResources, mps: bool) -> Vec<String> {
    let key = if mps { "mps" } else { "timeSlicing" };
    let mut out = Vec::new();
    for (i, r) in section.resources.iter().enumerate() {
        if r.devices != Devices::All && mps {
            // gpu-mps-daemon honours the list, and only GPUs whose daemon is ready are advertised.
            out.push(format!(
                "sharing.mps.resources[{i}].devices: only the GPUs gpu-mps-daemon runs MPS on are advertised (NVIDIA's plugin would share every {})",
                r.full_name()
            ));
        } else if r.devices != Devices::All {
            out.push(format!(
                "sharing.{key}.resources[{i}].devices: ignored, every device of {} is shared (as NVIDIA's plugin ignores it)",
                r.full_name()
            ));
        }
        let by_default = format!("{}.shared", r.full_name());
        let rename = r.rename.as_deref().unwrap_or("");
        let implied = rename.is_empty() || (section.rename_by_default && rename == by_default);
        match r.rename.as_deref() {
            Some(rn) if !implied => {
                out.push(format!(
                    "sharing.{key}.resources[{i}].rename: {rn:?} ignored, advertised as {} (as NVIDIA's plugin ignores it; use renameByDefault for <name>.shared)",
                    advertised_name(section, &r.full_name())
                ));
            }
            _ => {}
        }
    }
    out
}

/// The name replicas of `resource` are advertised under.
pub fn advertised_name(section: &ReplicatedResources, resource: &str) -> String {
    if section.rename_by_default {
        format!("{resource}.shared")
    } else {
        resource.to_string()
    }
}

/// Spreads `base` over resources, multiplying shared ones into `<uuid>::<n>` replicas.
fn replicate(
    base: &[BaseDevice],
    replicated: Option<(&ReplicatedResources, bool)>,
    mps_ready: &dyn Fn(&str) -> bool,
) -> Result<Vec<Resource>, AdvertiseError> {
    let mut out: BTreeMap<String, Resource> = BTreeMap::new();
    for d in base {
        let shared = replicated.and_then(|(section, mps)| {
            let r = section
                .resources
                .iter()
                .find(|r| full_resource_name(&r.name) == d.resource)?;
            Some((section, r, mps))
        });
        let Some((section, r, mps)) = shared else {
            let entry = out
                .entry(d.resource.clone())
                .or_insert_with(|| unshared(&d.resource));
            entry.devices.push(device(d, d.uuid.clone(), None));
            continue;
        };
        let replicas = u32::try_from(r.replicas).map_err(|_| AdvertiseError::Replicas {
            resource: d.resource.clone(),
            replicas: r.replicas,
        })?;
        if mps {
            check_mps(d, replicas)?;
        }
        let name = advertised_name(section, &d.resource);
        let entry = out.entry(name.clone()).or_insert_with(|| Resource {
            name,
            sharing: if mps {
                SharingKind::Mps
            } else {
                SharingKind::TimeSlicing
            },
            replicas,
            fail_requests_greater_than_one: section.fail_requests_greater_than_one,
            devices: Vec::new(),
        });
        if mps && !mps_ready(&d.backing.gpu_uuid) {
            continue;
        }
        for n in 0..replicas {
            let id = format!("{}::{n}", d.uuid);
            entry.devices.push(device(d, id, Some(n)));
        }
    }
    Ok(out.into_values().collect())
}

fn check_mps(d: &BaseDevice, replicas: u32) -> Result<(), AdvertiseError> {
    if d.backing.mig.is_some() {
        return Err(AdvertiseError::MpsOnMig {
            uuid: d.uuid.clone(),
        });
    }
    let max = crate::kdp::max_mps_replicas(d.compute_capability);
    if replicas > max {
        return Err(AdvertiseError::MpsReplicas {
            uuid: d.uuid.clone(),
            replicas,
            max,
        });
    }
    Ok(())
}

fn unshared(name: &str) -> Resource {
    Resource {
        name: name.to_string(),
        sharing: SharingKind::None,
        replicas: 1,
        fail_requests_greater_than_one: false,
        devices: Vec::new(),
    }
}

fn device(d: &BaseDevice, id: String, replica: Option<u32>) -> AdvertisedDevice {
    AdvertisedDevice {
        id,
        backing: d.backing.clone(),
        replica,
        numa_node: None,
    }
}
