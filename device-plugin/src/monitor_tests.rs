//! [`Following`] against the mock NVML: after a load that brings other MIG devices (a
//! re-partition), an Xid of a new MIG device reaches the health channel.

use std::io::Write;
use std::time::Duration;

use gpuhook_node::{
    DeviceMajors, DiscoverySource, DriverFiles, Gpu, Inventory, MigDevice, INVENTORY_FORMAT_VERSION,
};
use gpuhook_sharing::{Advertisement, DeviceIdStrategy};

use super::*;
use crate::health::mock_tests::Node;
use crate::health::XidFilter;

const GPU0: &str = "GPU-a100a100-0000-4000-8000-000000000000";
const GPU1: &str = "GPU-a100a100-0000-4000-8000-000000000001";
const MIG_A: &str = "MIG-11111111-2222-5333-8444-555555555555";
const MIG_B: &str = "MIG-66666666-7777-5888-9999-aaaaaaaaaaaa";

/// The shared test node's profile: GPU 0 with MIG (4g.40gb at GI 1, 1g.10gb at GI 11).
const PROFILE: &str = include_str!("../../sim/testdata/own-a100-partial.toml");

/// The profile's node as discovery lists it: GPU 0 with MIG devices `migs` ((uuid, GI id), CI
/// 0), GPU 1 whole.
fn inventory(migs: &[(&str, u32)]) -> Inventory {
    let gpu = |i: u32, uuid: &str, migs: &[(&str, u32)]| Gpu {
        index: i,
        minor: i,
        uuid: uuid.into(),
        pci_bus_id: format!("00000000:{:02x}:00.0", 0x18 + i),
        name: "NVIDIA A100-SXM4-80GB".into(),
        memory_mib: 81920,
        architecture: Some("ampere".into()),
        compute_capability: Some((8, 0)),
        brand: Some("nvidia".into()),
        mig_enabled: !migs.is_empty(),
        mig_devices: (0u32..)
            .zip(migs)
            .map(|(m, (uuid, gi))| MigDevice {
                index: m,
                parent_index: i,
                gi_id: *gi,
                ci_id: 0,
                uuid: (*uuid).into(),
                memory_mib: 9856,
                profile: None,
                gi_cap_minor: 0,
                ci_cap_minor: 0,
            })
            .collect(),
    };
    Inventory {
        format_version: INVENTORY_FORMAT_VERSION,
        driver_root: "/".into(),
        dev_root: "/".into(),
        driver_version: "570.158.01".into(),
        cuda_driver_version: Some("12.8".into()),
        majors: DeviceMajors {
            nvidia: 195,
            nvidia_uvm: None,
            nvidia_caps: None,
            nvidia_caps_imex_channels: None,
        },
        gpus: vec![gpu(0, GPU0, migs), gpu(1, GPU1, &[])],
        mig_caps: None,
        files: DriverFiles::default(),
        source: DiscoverySource::Nvml,
    }
}

/// A source whose load gives `inv` and an empty advertisement.
struct Node0(Inventory);

impl AdSource for Node0 {
    fn watched(&self) -> Vec<PathBuf> {
        Vec::new()
    }
    fn load(&mut self) -> Result<Loaded, PreferError> {
        Ok(Loaded {
            ad: Advertisement {
                config_name: "default".into(),
                resources: Vec::new(),
                labels: Default::default(),
                device_list_strategies: Vec::new(),
                device_id_strategy: DeviceIdStrategy::Uuid,
                pass_device_specs: false,
                cdi_annotation_prefix: "cdi.k8s.io/".into(),
                mps_root: None,
            },
            inventory: Some(Arc::new(self.0.clone())),
            policy: Default::default(),
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_load_with_new_mig_devices_retargets_the_monitor() {
    let node = Node::with_profile(PROFILE);
    // The monitor starts as before a re-partition: GPU 0 without MIG_B.
    let before = watched_gpus(&inventory(&[(MIG_A, 1)]));
    let inv = inventory(&[(MIG_A, 1), (MIG_B, 11)]);
    let (tx, mut rx) = tokio::sync::mpsc::channel(16);
    let config = HealthConfig {
        xids: XidFilter::from_values("", ""),
        wait: Duration::from_millis(100),
        probe_interval: Duration::from_millis(100),
        xid_hold: Duration::from_secs(60),
    };
    let monitor = HealthMonitor::start(node.nvml.clone(), before.clone(), config, tx)
        .expect("monitor starts");
    let mut source = Following::new(Box::new(Node0(inv)), monitor.retarget(), before);
    tokio::task::spawn_blocking(move || source.load().map(|_| ()))
        .await
        .expect("load")
        .expect("loads");
    let events = node.dir.path().join("gpuhook-sim-state/events");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(events)
        .expect("events");
    writeln!(f, "xid {MIG_B} 48").expect("inject");
    let change = tokio::time::timeout(Duration::from_secs(30), rx.recv())
        .await
        .expect("a change")
        .expect("open");
    assert_eq!(
        (
            change.gpu_uuid.as_str(),
            change.mig_uuid.as_deref(),
            change.healthy
        ),
        (GPU0, Some(MIG_B), false)
    );
    monitor.stop();
}
