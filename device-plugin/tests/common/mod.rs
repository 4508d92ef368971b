//! A fake kubelet that plays the device manager's part exactly as
//! `pkg/kubelet/cm/devicemanager` does (see device-plugin/README.md for each behaviour and its
//! source), plus hand-built advertisements.
#![allow(dead_code)]

pub mod node;

#[allow(unused_imports)] // each test crate uses a part
pub use gpuhook_device_plugin::fake_kubelet::{
    cleanup_plugin_directory, next_list, FakeKubelet, Registered, WAIT,
};

use std::path::PathBuf;

use gpuhook_device_plugin::run::{AdSource, Loaded};
use gpuhook_device_plugin::service::PreferError;
use gpuhook_sharing::{
    AdvertisedDevice, Advertisement, Backing, DeviceIdStrategy, DeviceListStrategy, Resource,
    SharingKind,
};

/// The UUID of test GPU `i`.
pub fn gpu_uuid(i: u32) -> String {
    format!("GPU-0000000{i}-1111-2222-3333-444444444444")
}

/// An advertisement of `gpus` full GPUs on NUMA node `i % 2`, with `replicas` (1 = not shared)
/// under `name`, answered with `strategies`.
pub fn advertisement(
    name: &str,
    gpus: u32,
    replicas: u32,
    sharing: SharingKind,
    strategies: &[DeviceListStrategy],
) -> Advertisement {
    let mut devices = Vec::new();
    for i in 0..gpus {
        let backing = Backing {
            gpu_uuid: gpu_uuid(i),
            gpu_index: i,
            mig: None,
            device_name: gpu_uuid(i),
        };
        for r in 0..replicas {
            let shared = replicas > 1;
            devices.push(AdvertisedDevice {
                id: if shared {
                    format!("{}::{r}", gpu_uuid(i))
                } else {
                    gpu_uuid(i)
                },
                backing: backing.clone(),
                replica: shared.then_some(r),
                numa_node: Some(i % 2),
            });
        }
    }
    Advertisement {
        config_name: "default".into(),
        resources: vec![Resource {
            name: name.into(),
            sharing,
            replicas,
            fail_requests_greater_than_one: sharing == SharingKind::Mps,
            devices,
        }],
        labels: Default::default(),
        device_list_strategies: strategies.to_vec(),
        device_id_strategy: DeviceIdStrategy::Uuid,
        pass_device_specs: false,
        cdi_annotation_prefix: "cdi.k8s.io/".into(),
        mps_root: None,
    }
}

/// Serves a fixed advertisement.
pub struct Fixed(pub Advertisement);

impl AdSource for Fixed {
    fn watched(&self) -> Vec<PathBuf> {
        Vec::new()
    }
    fn load(&mut self) -> Result<Loaded, PreferError> {
        Ok(Loaded {
            ad: self.0.clone(),
            inventory: None,
            policy: Default::default(),
        })
    }
}
