//! The spec a plan gives: names, limits per share, mounts, minimum version; written, loaded back
//! by the CDI registry and applied to an OCI spec like a runtime does.
use super::*;
use crate::config::parse;
use crate::inventory::facts_of;
use crate::plan::{resolve, Overrides};
use gpuhook_node::{DeviceMajors, DiscoverySource, DriverFiles, Gpu, INVENTORY_FORMAT_VERSION};

fn inventory() -> Inventory {
    Inventory {
        format_version: INVENTORY_FORMAT_VERSION,
        driver_root: "/".into(),
        dev_root: "/".into(),
        driver_version: "570.158.01".into(),
        cuda_driver_version: Some("12.8".into()),
        majors: DeviceMajors {
            nvidia: 195,
            nvidia_uvm: Some(510),
            nvidia_caps: None,
            nvidia_caps_imex_channels: None,
        },
        gpus: (0..2)
            .map(|i| Gpu {
                index: i,
                minor: i,
                uuid: format!("GPU-{i:08x}-1111-2222-3333-444455556666"),
                pci_bus_id: format!("00000000:{:02x}:00.0", 0x10 + i),
                name: "NVIDIA L20".into(),
                memory_mib: 46068,
                architecture: None,
                compute_capability: None,
                brand: None,
                mig_enabled: false,
                mig_devices: vec![],
            })
            .collect(),
        mig_caps: None,
        files: DriverFiles::default(),
        source: DiscoverySource::Nvml,
    }
}

fn plan(extra: &str) -> Plan {
    let cfg = parse(&format!(
        "version: v1\nsharing:\n  mps:\n    resources:\n      - {{name: nvidia.com/gpu, replicas: 4, devices: all}}\nmpsDaemon:\n  mpsRoot: /run/m\n  shmSize: 64Mi\n{extra}"
    ))
    .unwrap();
    resolve(&cfg, &facts_of(&inventory()), &Overrides::default()).unwrap()
}

fn env_of(d: &Device) -> Vec<&str> {
    d.container_edits.env.iter().map(String::as_str).collect()
}

#[test]
fn devices_per_share_with_scaled_limits() {
    let p = plan("  shares: [{name: quarter, fraction: 1/4}, {name: half, fraction: 1/2}]\n");
    // Servers get the largest share; the default share keeps 1/replicas.
    assert_eq!(p.gpus[0].active_thread_percentage, 50);
    assert_eq!(p.gpus[0].pinned_memory_limit_mib, Some(23034));
    let spec = build_spec(&p, &inventory(), None).unwrap().unwrap();
    assert_eq!(spec.kind, "nvidia.com/gpu-mps");
    assert_eq!(spec.cdi_version, "0.5.0", "names start with a digit");
    let names: Vec<&str> = spec.devices.iter().map(|d| d.name.as_str()).collect();
    let u0 = "GPU-00000000-1111-2222-3333-444455556666";
    assert_eq!(names.len(), 12);
    for n in ["0", u0, "0-quarter", "0-half", "1-half"] {
        assert!(names.contains(&n), "{n} in {names:?}");
    }
    assert!(names.contains(&format!("{u0}-quarter").as_str()));
    let dev = |n: &str| spec.devices.iter().find(|d| d.name == n).unwrap();
    let half = env_of(dev("0-half"));
    assert!(
        half.contains(&"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50"),
        "{half:?}"
    );
    assert!(
        half.contains(&"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=23034M"),
        "{half:?}"
    );
    assert!(
        half.contains(&"CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps"),
        "{half:?}"
    );
    assert!(half.contains(&"NVIDIA_VISIBLE_DEVICES=void"), "{half:?}");
    let quarter = env_of(dev(&format!("{u0}-quarter")));
    assert!(
        quarter.contains(&"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25"),
        "{quarter:?}"
    );
    assert!(
        quarter.contains(&"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=11517M"),
        "{quarter:?}"
    );
    let d1 = dev("1");
    let mounts: Vec<(&str, &str)> = d1
        .container_edits
        .mounts
        .iter()
        .map(|m| (m.host_path.as_str(), m.container_path.as_str()))
        .collect();
    let u1 = "GPU-00000001-1111-2222-3333-444455556666";
    assert!(
        mounts.contains(&(&format!("/run/m/{u1}/pipe"), "/tmp/nvidia-mps")),
        "{mounts:?}"
    );
    assert!(
        mounts.contains(&(&format!("/run/m/{u1}/shm"), "/dev/shm")),
        "{mounts:?}"
    );
    let nodes: Vec<&str> = d1
        .container_edits
        .device_nodes
        .iter()
        .map(|n| n.path.as_str())
        .collect();
    assert!(
        nodes.contains(&"/dev/nvidia1") && !nodes.contains(&"/dev/nvidia0"),
        "{nodes:?}"
    );
    assert!(
        nodes.contains(&"/dev/nvidiactl") && nodes.contains(&"/dev/nvidia-uvm"),
        "{nodes:?}"
    );
}

#[test]
fn written_spec_is_applied_like_a_runtime_and_removed() {
    let t = tempfile::tempdir().unwrap();
    let p = plan(&format!(
        "  cdiSpecDir: {}\n  containerPipeDirectory: /mps/pipe\n  shares: [{{name: half, fraction: 0.5}}]\n",
        t.path().display()
    ));
    let only: BTreeSet<String> = [p.gpus[1].uuid.clone()].into();
    let spec = build_spec(&p, &inventory(), Some(&only)).unwrap().unwrap();
    assert!(spec
        .devices
        .iter()
        .all(|d| d.name.starts_with('1') || d.name.contains("00000001")));
    let path = spec_path(&p.cdi.spec_dir);
    assert_eq!(path, t.path().join("nvidia.com-gpu-mps.json"));
    assert!(publish(&path, Some(&spec)).unwrap());
    assert!(
        !publish(&path, Some(&spec)).unwrap(),
        "unchanged: not rewritten"
    );
    let reg = gpuhook_cdi::Registry::load(&[t.path()]);
    assert!(reg.errors.is_empty(), "{:?}", reg.errors);
    let mut oci = serde_json::json!({"process": {"env": ["PATH=/bin", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100"]},
        "mounts": [{"destination": "/dev/shm", "type": "tmpfs", "source": "shm"}]});
    gpuhook_cdi::apply_devices(&mut oci, &reg, &["nvidia.com/gpu-mps=1-half".to_string()]).unwrap();
    let env: Vec<&str> = oci["process"]["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(
        env.contains(&"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50"),
        "{env:?}"
    );
    assert!(
        !env.contains(&"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100"),
        "{env:?}"
    );
    assert!(
        env.contains(&"CUDA_MPS_PIPE_DIRECTORY=/mps/pipe"),
        "{env:?}"
    );
    let shm: Vec<&serde_json::Value> = oci["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["destination"] == "/dev/shm")
        .collect();
    assert_eq!(shm.len(), 1, "the container's /dev/shm is replaced");
    assert!(
        shm[0]["source"].as_str().unwrap().ends_with("/shm"),
        "{shm:?}"
    );
    // A share that does not exist: the consumer's error, nothing applied.
    let before = oci.clone();
    let err =
        gpuhook_cdi::apply_devices(&mut oci, &reg, &["nvidia.com/gpu-mps=0-eighth".to_string()])
            .unwrap_err();
    assert_eq!(
        err.to_string(),
        "unresolvable CDI devices nvidia.com/gpu-mps=0-eighth"
    );
    assert_eq!(oci, before);
    assert!(remove_spec(&path).unwrap());
    assert!(!path.exists());
    assert!(!remove_spec(&path).unwrap());
    // Another kind's file under our name is not ours to remove.
    std::fs::write(&path, r#"{"cdiVersion":"0.3.0","kind":"acme.com/x","devices":[{"name":"a","containerEdits":{"env":["A=1"]}}]}"#).unwrap();
    assert!(remove_spec(&path).is_err());
    assert!(path.exists());
    assert!(build_spec(&p, &inventory(), Some(&BTreeSet::new()))
        .unwrap()
        .is_none());
}

#[test]
fn host_driver_root_gives_the_hosts_paths() {
    let p = plan("  hostDriverRoot: /host\n");
    let spec = build_spec(&p, &inventory(), None).unwrap().unwrap();
    let n = &spec.devices[0].container_edits.device_nodes[0];
    assert_eq!(
        (n.path.as_str(), n.host_path.as_deref()),
        ("/dev/nvidia0", Some("/host/dev/nvidia0"))
    );
    let spec = build_spec(&plan(""), &inventory(), None).unwrap().unwrap();
    assert_eq!(
        spec.devices[0].container_edits.device_nodes[0].host_path,
        None
    );
}

/// Every device's setup hook names its share and the host pipe directory, so `gpuhook hook setup`
/// runs the start check where the runtime applies the spec itself; the reader that the runtime
/// wrapper and the prestart hook use finds the same pipe directory.
#[test]
fn every_device_hook_carries_its_share_for_the_start_check() {
    let p = plan("  shares: [{name: half, fraction: 0.5}]\n");
    let spec = build_spec(&p, &inventory(), None).unwrap().unwrap();
    assert!(!spec.devices.is_empty());
    for d in &spec.devices {
        let setup: Vec<_> = d
            .container_edits
            .hooks
            .iter()
            .filter(|h| h.args.get(1..3) == Some(&["hook".to_string(), "setup".to_string()][..]))
            .collect();
        assert_eq!(setup.len(), 1, "{}: one setup hook", d.name);
        let args = gpuhook_cdi::edits::SetupHookArgs::from_args(&setup[0].args[3..]).unwrap();
        let uuid = p
            .gpus
            .iter()
            .find(|g| {
                d.name.starts_with(&g.uuid)
                    || d.name.split('-').next() == Some(&g.index.to_string())
            })
            .unwrap()
            .uuid
            .clone();
        let want = gpuhook_cdi::edits::SetupMpsShare {
            name: format!("nvidia.com/gpu-mps={}", d.name),
            pipe_dir: p.mps_root.join(&uuid).join("pipe"),
        };
        assert_eq!(args.mps_shares, std::slice::from_ref(&want), "{}", d.name);
        let mount = d
            .container_edits
            .mounts
            .iter()
            .find(|m| m.host_path == want.pipe_dir.to_str().unwrap());
        assert!(
            mount.is_some(),
            "{}: the hook's pipe directory is mounted",
            d.name
        );
    }
}
