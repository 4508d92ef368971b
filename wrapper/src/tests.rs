//! Unit tests of the wrapper glue against a fake node (an inventory cache file, no devices).

use std::path::{Path, PathBuf};

use crate::resolve::GenerateMissing;
use crate::run::{DeviceRequest, Injection};
use gpuhook_cdi::{Format, GenerateOptions};
use gpuhook_node::{
    DeviceMajors, DiscoverySource, DriverFiles, Gpu, Inventory, MigDevice, INVENTORY_FORMAT_VERSION,
};
use serde_json::{json, Value};

use super::{NodeState, WrapperRequest};
use gpuhook::config::{Config, RuntimeMode};

const GPU0: &str = "GPU-0a1b2c3d-0000-1111-2222-333344445555";
const MIG10: &str = "MIG-9a1b2c3d-0000-1111-2222-000000000000";

fn gpu(index: u32, uuid: &str, pci: &str) -> Gpu {
    Gpu {
        index,
        minor: index,
        uuid: uuid.into(),
        pci_bus_id: pci.into(),
        name: "NVIDIA H100 80GB HBM3".into(),
        memory_mib: 81920,
        architecture: None,
        compute_capability: Some((9, 0)),
        brand: Some("nvidia".into()),
        mig_enabled: false,
        mig_devices: Vec::new(),
    }
}

/// GPU 0 whole, GPU 1 MIG-enabled with one MIG device.
fn inventory(root: &Path) -> Inventory {
    let mut g1 = gpu(
        1,
        "GPU-1a1b2c3d-0000-1111-2222-333344445555",
        "00000000:3B:00.0",
    );
    g1.mig_enabled = true;
    g1.mig_devices = vec![MigDevice {
        index: 0,
        uuid: MIG10.into(),
        parent_index: 1,
        gi_id: 7,
        ci_id: 0,
        memory_mib: 9856,
        profile: Some("1g.10gb".into()),
        gi_cap_minor: 10,
        ci_cap_minor: 11,
    }];
    Inventory {
        format_version: INVENTORY_FORMAT_VERSION,
        driver_root: root.into(),
        dev_root: root.into(),
        driver_version: "570.158.01".into(),
        cuda_driver_version: Some("12.8".into()),
        majors: DeviceMajors {
            nvidia: 195,
            nvidia_uvm: Some(510),
            nvidia_caps: Some(511),
            nvidia_caps_imex_channels: None,
        },
        gpus: vec![gpu(0, GPU0, "00000000:18:00.0"), g1],
        mig_caps: None,
        files: DriverFiles::default(),
        source: DiscoverySource::Nvml,
    }
}

struct Fixture {
    tmp: tempfile::TempDir,
    config: Config,
}

impl Fixture {
    fn new(mode: RuntimeMode, generate_missing: bool) -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_path_buf();
        let cache = root.join("inventory.json");
        inventory(&root).save_json(&cache).unwrap();
        std::fs::write(root.join("gpuhook"), "").unwrap();
        std::fs::create_dir_all(root.join("cdi")).unwrap();
        let mut config = Config {
            driver_root: root.clone(),
            inventory_cache: cache,
            cdi_spec_dirs: vec![root.join("cdi")],
            ..Config::default()
        };
        config.runtime.mode = mode;
        config.runtime.generate_missing = generate_missing;
        Fixture { tmp, config }
    }

    fn node(&self) -> NodeState<'_> {
        NodeState::new(&self.config).with_gpuhook_path(self.gpuhook())
    }

    fn gpuhook(&self) -> PathBuf {
        self.tmp.path().join("gpuhook")
    }

    /// Writes the spec `gpuhook cdi generate` would write into the spec dir.
    fn write_spec(&self) -> gpuhook_cdi::Spec {
        let mut opts = GenerateOptions::new(self.gpuhook());
        opts.edits.hook_env = gpuhook_cdi::DEFAULT_HOOK_ENV
            .iter()
            .map(|s| s.to_string())
            .collect();
        let spec = gpuhook_cdi::generate(&inventory(self.tmp.path()), &opts).unwrap();
        let path = self.tmp.path().join("cdi/nvidia.com-gpu.json");
        gpuhook_cdi::write_spec(&spec, &path, Format::Json).unwrap();
        spec
    }
}

fn spec_with(env: &[&str], annotations: Value) -> Value {
    json!({
        "process": {"env": env, "capabilities": {"bounding": ["CAP_CHOWN"]}},
        "annotations": annotations,
        "hostname": "test"
    })
}

fn ask(f: &Fixture, spec: &Value) -> Result<Option<Injection>, String> {
    let node = f.node();
    let req = WrapperRequest::new(&f.config, &node);
    req.injection(f.tmp.path(), Some("c1"), spec)
        .map_err(|e| e.to_string())
}

fn names(v: &[&str]) -> Option<Injection> {
    Some(Injection::Cdi(v.iter().map(|s| s.to_string()).collect()))
}

#[test]
fn non_gpu_containers_get_nothing() {
    let f = Fixture::new(RuntimeMode::Cdi, true);
    for env in [
        vec!["PATH=/bin"],
        vec!["NVIDIA_VISIBLE_DEVICES="],
        vec!["NVIDIA_VISIBLE_DEVICES=void"],
        vec!["NVIDIA_VISIBLE_DEVICES=0,void"],
    ] {
        assert_eq!(ask(&f, &spec_with(&env, json!({}))), Ok(None), "{env:?}");
    }
    // Other annotations are not CDI requests.
    let spec = spec_with(&[], json!({"io.kubernetes.cri.sandbox-id": "x"}));
    assert_eq!(ask(&f, &spec), Ok(None));
}

#[test]
fn env_ids_become_cdi_names_and_qualified_names_pass_as_is() {
    let f = Fixture::new(RuntimeMode::Cdi, true);
    let env = format!("NVIDIA_VISIBLE_DEVICES=0, {GPU0},1:0 ,{MIG10},nvidia.com/gpu=gpu0");
    assert_eq!(
        ask(&f, &spec_with(&[&env], json!({}))),
        Ok(names(&[
            "nvidia.com/gpu=0",
            &format!("nvidia.com/gpu={GPU0}"),
            "nvidia.com/gpu=1:0",
            &format!("nvidia.com/gpu={MIG10}"),
            "nvidia.com/gpu=gpu0",
        ]))
    );
    assert_eq!(
        ask(&f, &spec_with(&["NVIDIA_VISIBLE_DEVICES=all"], json!({}))),
        Ok(names(&["nvidia.com/gpu=all"]))
    );
    let err = ask(&f, &spec_with(&["NVIDIA_VISIBLE_DEVICES=0;rm"], json!({}))).unwrap_err();
    assert!(err.contains("0;rm"), "{err}");
}

#[test]
fn annotations_win_and_keep_every_kind_in_key_order() {
    let f = Fixture::new(RuntimeMode::Cdi, true);
    let ann = json!({
        "cdi.k8s.io/b": "vendor.example/fpga=1",
        "cdi.k8s.io/a": "nvidia.com/gpu=1:0, nvidia.com/gpu=0",
        "other": "nvidia.com/gpu=all"
    });
    let spec = spec_with(&["NVIDIA_VISIBLE_DEVICES=all"], ann);
    assert_eq!(
        ask(&f, &spec),
        Ok(names(&[
            "nvidia.com/gpu=1:0",
            "nvidia.com/gpu=0",
            "vendor.example/fpga=1"
        ]))
    );
    // Only another vendor's device: still injected (nobody else does CDI on containerd 1.6),
    // and env ids are added to it.
    let spec = spec_with(
        &["NVIDIA_VISIBLE_DEVICES=0"],
        json!({"cdi.k8s.io/x": "vendor.example/fpga=1"}),
    );
    assert_eq!(
        ask(&f, &spec),
        Ok(names(&["nvidia.com/gpu=0", "vendor.example/fpga=1"]))
    );
    let spec = spec_with(&[], json!({"cdi.k8s.io/x": "vendor.example/fpga=1"}));
    assert_eq!(ask(&f, &spec), Ok(names(&["vendor.example/fpga=1"])));
    let spec = spec_with(&[], json!({"cdi.k8s.io/x": "not-a-name"}));
    assert!(ask(&f, &spec).unwrap_err().contains("cdi.k8s.io/x"));
}

#[test]
fn none_gets_the_common_edits_of_the_spec_file_else_generated_ones() {
    let f = Fixture::new(RuntimeMode::Cdi, true);
    let spec = spec_with(&["NVIDIA_VISIBLE_DEVICES=none"], json!({}));
    // No spec file: generated in memory, no device node of a GPU.
    let Ok(Some(Injection::Edits(generated))) = ask(&f, &spec) else {
        panic!("none must give edits");
    };
    let paths: Vec<&str> = generated
        .device_nodes
        .iter()
        .map(|n| n.path.as_str())
        .collect();
    assert!(paths.contains(&"/dev/nvidiactl"), "{paths:?}");
    assert!(!paths.contains(&"/dev/nvidia0"), "{paths:?}");
    assert!(generated
        .env
        .contains(&"NVIDIA_VISIBLE_DEVICES=void".to_string()));
    // With a spec file: exactly its common edits.
    let file = f.write_spec();
    assert_eq!(
        ask(&f, &spec),
        Ok(Some(Injection::Edits(Box::new(file.container_edits))))
    );
    // Without a file and without generate-missing: an error that names the fix.
    let g = Fixture::new(RuntimeMode::Cdi, false);
    let err = ask(&g, &spec).unwrap_err();
    assert!(err.contains("gpuhook cdi generate"), "{err}");
}

#[test]
fn requirements_are_checked_against_the_inventory() {
    let f = Fixture::new(RuntimeMode::Cdi, true);
    let ok = spec_with(
        &[
            "NVIDIA_VISIBLE_DEVICES=0",
            "NVIDIA_REQUIRE_CUDA=cuda>=12.0 brand=tesla",
        ],
        json!({}),
    );
    assert_eq!(ask(&f, &ok), Ok(names(&["nvidia.com/gpu=0"])));
    let too_new = spec_with(
        &["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda>=13.0"],
        json!({}),
    );
    let err = ask(&f, &too_new).unwrap_err();
    assert!(err.contains("cuda>=13.0"), "{err}");
    let arch = spec_with(
        &["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_ARCH=arch>=10.0"],
        json!({}),
    );
    assert!(ask(&f, &arch).unwrap_err().contains("arch>=10.0"));
    // Disabled: not checked.
    let disabled = spec_with(
        &[
            "NVIDIA_VISIBLE_DEVICES=0",
            "NVIDIA_REQUIRE_CUDA=cuda>=13.0",
            "NVIDIA_DISABLE_REQUIRE=true",
        ],
        json!({}),
    );
    assert_eq!(ask(&f, &disabled), Ok(names(&["nvidia.com/gpu=0"])));
}

#[test]
fn jit_and_legacy_modes() {
    let f = Fixture::new(RuntimeMode::JitCdi, true);
    let spec = spec_with(&["NVIDIA_VISIBLE_DEVICES=1:0"], json!({}));
    let Ok(Some(Injection::Edits(edits))) = ask(&f, &spec) else {
        panic!("jit-cdi gives edits")
    };
    let paths: Vec<&str> = edits.device_nodes.iter().map(|n| n.path.as_str()).collect();
    for p in [
        "/dev/nvidia1",
        "/dev/nvidia-caps/nvidia-cap10",
        "/dev/nvidiactl",
    ] {
        assert!(paths.contains(&p), "{p} in {paths:?}");
    }
    assert!(!paths.contains(&"/dev/nvidia0"));
    let err = ask(&f, &spec_with(&["NVIDIA_VISIBLE_DEVICES=7"], json!({}))).unwrap_err();
    assert!(err.contains('7'), "{err}");

    let f = Fixture::new(RuntimeMode::Legacy, true);
    let Ok(Some(Injection::Edits(edits))) = ask(&f, &spec) else {
        panic!("legacy gives edits")
    };
    assert_eq!(edits.hooks.len(), 1);
    assert_eq!(edits.hooks[0].hook_name, "prestart");
    assert_eq!(edits.hooks[0].args, ["gpuhook", "prestart"]);
    assert!(edits.hooks[0]
        .env
        .iter()
        .any(|e| e.starts_with("GPUHOOK_CONFIG=")));
}

#[test]
fn generate_missing_defines_resolvable_names_only() {
    let f = Fixture::new(RuntimeMode::Cdi, true);
    let node = f.node();
    let missing: Vec<String> = [
        "nvidia.com/gpu=0",
        "nvidia.com/gpu=00000000:18:00.0",
        "nvidia.com/gpu=gpu-0A1B2C3D-0000-1111-2222-333344445555",
        "nvidia.com/gpu=99",
        "vendor.example/fpga=0",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let specs = node.generate(&missing).unwrap();
    assert_eq!(specs.len(), 1);
    let defined: Vec<String> = specs[0].qualified_devices().map(|(n, _)| n).collect();
    for want in &missing[..2] {
        assert!(defined.contains(want), "{want} in {defined:?}");
    }
    assert!(!defined.contains(&missing[3]));
    assert!(!defined.iter().any(|n| n.starts_with("vendor.example")));
    // The PCI alias carries GPU 0's node.
    let pci = specs[0]
        .devices
        .iter()
        .find(|d| d.name == "00000000:18:00.0")
        .unwrap();
    assert_eq!(pci.container_edits.device_nodes[0].path, "/dev/nvidia0");
    // Nothing of ours missing: no discovery, nothing generated.
    assert!(node.generate(&missing[4..]).unwrap().is_empty());
}

#[test]
fn bundle_edit_end_to_end_without_runc() {
    let f = Fixture::new(RuntimeMode::Cdi, true);
    let bundle = f.tmp.path().join("bundle");
    std::fs::create_dir_all(&bundle).unwrap();
    let write = |env: &str| {
        let spec = json!({"ociVersion": "1.0.2", "process": {"env": [env]}, "linux": {}});
        std::fs::write(bundle.join("config.json"), spec.to_string()).unwrap();
    };
    let node = f.node();
    let req = WrapperRequest::new(&f.config, &node);
    let rc = super::runtime_config(&f.config);
    // Unknown device: the runtimes' wording, config.json untouched.
    write("NVIDIA_VISIBLE_DEVICES=99");
    let before = std::fs::read(bundle.join("config.json")).unwrap();
    let err = crate::run::edit_bundle(&bundle, Some("c1"), &rc, &req, Some(&node)).unwrap_err();
    assert!(
        err.to_string()
            .contains("unresolvable CDI devices nvidia.com/gpu=99"),
        "{err}"
    );
    assert_eq!(std::fs::read(bundle.join("config.json")).unwrap(), before);
    // No spec file yet: generated in memory.
    write("NVIDIA_VISIBLE_DEVICES=0");
    assert!(crate::run::edit_bundle(&bundle, Some("c1"), &rc, &req, Some(&node)).unwrap());
    let out: Value =
        serde_json::from_slice(&std::fs::read(bundle.join("config.json")).unwrap()).unwrap();
    let devs: Vec<&str> = out["linux"]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["path"].as_str().unwrap())
        .collect();
    assert!(
        devs.contains(&"/dev/nvidia0") && !devs.contains(&"/dev/nvidia1"),
        "{devs:?}"
    );
    // Without generate-missing the same request fails.
    write("NVIDIA_VISIBLE_DEVICES=0");
    let err = crate::run::edit_bundle(&bundle, Some("c1"), &rc, &req, None).unwrap_err();
    assert!(err
        .to_string()
        .contains("unresolvable CDI devices nvidia.com/gpu=0"));
}

#[path = "extras_tests.rs"]
mod extras;
