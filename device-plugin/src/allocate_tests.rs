use std::collections::BTreeMap;

use gpuhook_sharing::{
    AdvertisedDevice, Backing, DeviceIdStrategy, DeviceListStrategy, MigBacking, Resource,
    SharingKind,
};

use super::*;
use crate::served::{AllocSettings, HealthState, Served};

fn mig_device(gpu: u32, mig: u32) -> AdvertisedDevice {
    AdvertisedDevice {
        id: format!("MIG-{gpu}-{mig}"),
        backing: Backing {
            gpu_uuid: format!("GPU-{gpu}"),
            gpu_index: gpu,
            mig: Some(MigBacking {
                uuid: format!("MIG-{gpu}-{mig}"),
                gi: mig + 1,
                ci: 0,
                profile: "1g.10gb".into(),
            }),
            device_name: format!("MIG-{gpu}-{mig}"),
        },
        replica: None,
        numa_node: None,
    }
}

/// envvar + passDeviceSpecs settings with `dev_root` and `device_paths`.
fn settings(
    dev_root: &std::path::Path,
    device_paths: BTreeMap<String, Vec<String>>,
) -> AllocSettings {
    AllocSettings {
        strategies: vec![DeviceListStrategy::Envvar],
        id_strategy: DeviceIdStrategy::Uuid,
        pass_device_specs: true,
        cdi_annotation_prefix: "cdi.k8s.io/".into(),
        mps_root: None,
        container_pipe_dir: "/tmp/nvidia-mps".into(),
        dev_root: dev_root.to_path_buf(),
        device_paths,
        policy: crate::preferred::AllocationPolicy::default(),
    }
}

/// passDeviceSpecs on a dev root that has nvidiactl and nvidia-uvm only: those two (NVIDIA
/// passes the control nodes that exist), then each device's nodes, `rw`, host paths under the
/// dev root; the parent GPU node of two MIG devices once.
#[test]
fn pass_device_specs_gives_existing_control_nodes_then_device_nodes() {
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir(root.path().join("dev")).unwrap();
    for n in ["nvidiactl", "nvidia-uvm"] {
        std::fs::write(root.path().join("dev").join(n), "").unwrap();
    }
    let paths: BTreeMap<String, Vec<String>> = [
        (
            "MIG-0-0",
            [
                "/dev/nvidia3",
                "/dev/nvidia-caps/nvidia-cap21",
                "/dev/nvidia-caps/nvidia-cap22",
            ],
        ),
        (
            "MIG-0-1",
            [
                "/dev/nvidia3",
                "/dev/nvidia-caps/nvidia-cap30",
                "/dev/nvidia-caps/nvidia-cap31",
            ],
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.map(String::from).to_vec()))
    .collect();
    let settings = settings(root.path(), paths);
    let resource = Resource {
        name: "nvidia.com/mig-1g.10gb".into(),
        sharing: SharingKind::None,
        replicas: 1,
        fail_requests_greater_than_one: false,
        devices: vec![mig_device(0, 0), mig_device(0, 1)],
    };
    let served = Served::new(resource, settings, HealthState::default());
    let r = container_response(&served, &["MIG-0-0".into(), "MIG-0-1".into()]).unwrap();
    let got: Vec<(String, String, String)> = r
        .devices
        .iter()
        .map(|d| {
            (
                d.container_path.clone(),
                d.host_path.clone(),
                d.permissions.clone(),
            )
        })
        .collect();
    let host = |p: &str| {
        root.path()
            .join(p.trim_start_matches('/'))
            .display()
            .to_string()
    };
    let want: Vec<(String, String, String)> = [
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia3",
        "/dev/nvidia-caps/nvidia-cap21",
        "/dev/nvidia-caps/nvidia-cap22",
        "/dev/nvidia-caps/nvidia-cap30",
        "/dev/nvidia-caps/nvidia-cap31",
    ]
    .iter()
    .map(|p| (p.to_string(), host(p), "rw".to_string()))
    .collect();
    assert_eq!(got, want);
    assert_eq!(
        r.envs.get("NVIDIA_VISIBLE_DEVICES").map(String::as_str),
        Some("MIG-0-0,MIG-0-1")
    );
}

/// An unhealthy GPU's MIG devices are unhealthy too (health keys are GPU or MIG UUIDs).
#[test]
fn gpu_health_covers_its_mig_devices() {
    let h = HealthState {
        unhealthy: ["GPU-0".to_string()].into(),
    };
    assert!(h.is_unhealthy("GPU-0", Some("MIG-0-1")));
    assert!(!h.is_unhealthy("GPU-1", Some("MIG-1-0")));
    let h = HealthState {
        unhealthy: ["MIG-1-0".to_string()].into(),
    };
    assert!(h.is_unhealthy("GPU-1", Some("MIG-1-0")));
    assert!(!h.is_unhealthy("GPU-1", Some("MIG-1-1")));
}

fn mps_share(gpu: u32, n: u32) -> AdvertisedDevice {
    AdvertisedDevice {
        id: format!("GPU-{gpu}::{n}"),
        backing: Backing {
            gpu_uuid: format!("GPU-{gpu}"),
            gpu_index: gpu,
            mig: None,
            device_name: format!("GPU-{gpu}"),
        },
        replica: Some(n),
        numa_node: None,
    }
}

/// Replicas of two GPUs' MPS shares in one container are refused under every strategy, CDI
/// ones included: the container could reach only one of the daemons (#22).
#[test]
fn mps_request_spanning_gpus_is_refused_under_every_strategy() {
    let root = tempfile::tempdir().unwrap();
    let resource = Resource {
        name: "nvidia.com/gpu".into(),
        sharing: SharingKind::Mps,
        replicas: 2,
        fail_requests_greater_than_one: false,
        devices: vec![
            mps_share(0, 0),
            mps_share(0, 1),
            mps_share(1, 0),
            mps_share(1, 1),
        ],
    };
    let strategies = [
        vec![DeviceListStrategy::Envvar],
        vec![DeviceListStrategy::VolumeMounts],
        vec![DeviceListStrategy::CdiAnnotations],
        vec![DeviceListStrategy::CdiCri],
        vec![
            DeviceListStrategy::CdiAnnotations,
            DeviceListStrategy::CdiCri,
        ],
    ];
    for st in strategies {
        let mut s = settings(root.path(), BTreeMap::new());
        s.strategies = st.clone();
        s.mps_root = Some(root.path().to_path_buf());
        let served = Served::new(resource.clone(), s, HealthState::default());
        let err = container_response(&served, &["GPU-0::0".into(), "GPU-1::1".into()])
            .expect_err("two GPUs' shares");
        assert_eq!(
            err,
            AllocateError::MpsSpansGpus {
                resource: "nvidia.com/gpu".into(),
                gpus: "GPU-0, GPU-1".into()
            },
            "{st:?}"
        );
        // Two replicas of one GPU's share stay one share.
        let r = container_response(&served, &["GPU-0::0".into(), "GPU-0::1".into()])
            .unwrap_or_else(|e| panic!("{st:?}: {e}"));
        if st.contains(&DeviceListStrategy::CdiCri) {
            let names: Vec<_> = r.cdi_devices.iter().map(|d| d.name.as_str()).collect();
            assert_eq!(names, ["nvidia.com/gpu-mps=GPU-0"], "{st:?}");
        }
    }
}
