use super::*;
use crate::spec::Format;
use crate::test_support::*;

fn opts() -> GenerateOptions {
    GenerateOptions::new("/usr/bin/gpuhook")
}

fn names(spec: &Spec) -> Vec<&str> {
    spec.devices.iter().map(|d| d.name.as_str()).collect()
}

fn nodes<'a>(spec: &'a Spec, name: &str) -> Vec<&'a str> {
    let d = spec.devices.iter().find(|d| d.name == name).unwrap();
    d.container_edits
        .device_nodes
        .iter()
        .map(|n| n.path.as_str())
        .collect()
}

#[test]
fn default_spec_structure() {
    let spec = generate(&inventory(), &opts()).unwrap();
    assert_eq!(spec.kind, "nvidia.com/gpu");
    assert_eq!(spec.cdi_version, "0.5.0");
    assert_eq!(
        names(&spec),
        ["0", GPU0_UUID, "1:0", MIG0_UUID, "1:1", MIG1_UUID, "all"]
    );
    assert_eq!(nodes(&spec, "0"), ["/dev/nvidia0"]);
    assert_eq!(
        nodes(&spec, MIG1_UUID),
        [
            "/dev/nvidia1",
            "/dev/nvidia-caps/nvidia-cap75",
            "/dev/nvidia-caps/nvidia-cap76"
        ]
    );
    assert_eq!(
        nodes(&spec, "all"),
        [
            "/dev/nvidia0",
            "/dev/nvidia1",
            "/dev/nvidia-caps/nvidia-cap66",
            "/dev/nvidia-caps/nvidia-cap67",
            "/dev/nvidia-caps/nvidia-cap75",
            "/dev/nvidia-caps/nvidia-cap76",
        ]
    );
    for d in &spec.devices {
        let e = &d.container_edits;
        assert!(
            e.mounts.is_empty() && e.hooks.is_empty() && e.env.is_empty(),
            "{}: only nodes",
            d.name
        );
    }
    let common = &spec.container_edits;
    let ctl: Vec<_> = common
        .device_nodes
        .iter()
        .map(|n| n.path.as_str())
        .collect();
    assert_eq!(
        ctl,
        [
            "/dev/nvidiactl",
            "/dev/nvidia-uvm",
            "/dev/nvidia-uvm-tools",
            "/dev/nvidia-modeset"
        ]
    );
    assert_eq!(common.env, ["NVIDIA_VISIBLE_DEVICES=void"]);
    assert_eq!(common.mounts.len(), 8);
    assert!(common
        .hooks
        .iter()
        .all(|h| !h.env.is_empty() && h.args[0] == "gpuhook"));
    crate::validate::validate_spec(&spec).unwrap();
}

#[test]
fn output_is_deterministic_and_revalidates() {
    let a = generate(&inventory(), &opts())
        .unwrap()
        .to_bytes(Format::Json)
        .unwrap();
    let b = generate(&inventory(), &opts())
        .unwrap()
        .to_bytes(Format::Json)
        .unwrap();
    assert_eq!(a, b);
    let parsed = crate::validate::validate_bytes(&a, None).unwrap();
    assert_eq!(parsed.to_bytes(Format::Json).unwrap(), a);
    let y = generate(&inventory(), &opts())
        .unwrap()
        .to_bytes(Format::Yaml)
        .unwrap();
    crate::validate::validate_bytes(&y, Some(Format::Yaml)).unwrap();
}

#[test]
fn type_index_and_uuid_only() {
    let mut o = opts();
    o.name_strategies = vec![NameStrategy::TypeIndex];
    let spec = generate(&inventory(), &o).unwrap();
    assert_eq!(names(&spec), ["gpu0", "mig1:0", "mig1:1", "all"]);
    // No digit-leading names but hostPath (dev_root != /): still 0.5.0.
    assert_eq!(spec.cdi_version, "0.5.0");
    let mut inv = inventory();
    inv.dev_root = "/".into();
    let mut o = opts();
    o.name_strategies = vec![NameStrategy::Uuid, NameStrategy::Uuid];
    let spec = generate(&inv, &o).unwrap();
    assert_eq!(names(&spec), [GPU0_UUID, MIG0_UUID, MIG1_UUID, "all"]);
    assert_eq!(
        spec.cdi_version, "0.3.0",
        "nothing needs more than the floor"
    );
}

#[test]
fn custom_kind_and_errors() {
    let mut o = opts();
    o.vendor = "example.com".into();
    o.class = "accel".into();
    assert_eq!(
        generate(&inventory(), &o).unwrap().kind,
        "example.com/accel"
    );
    o.vendor = "-bad".into();
    let err = generate(&inventory(), &o).unwrap_err();
    assert!(err.to_string().contains("vendor"), "{err}");
    let mut o = opts();
    o.name_strategies.clear();
    assert!(generate(&inventory(), &o).is_err());
    let mut inv = inventory();
    inv.gpus.clear();
    let err = generate(&inv, &opts()).unwrap_err();
    assert!(err.to_string().contains("no GPU"), "{err}");
}

#[test]
fn mig_on_without_instances_is_nothing_to_describe_and_says_what_to_do() {
    let mut inv = inventory();
    for g in &mut inv.gpus {
        g.mig_enabled = true;
        g.mig_devices.clear();
    }
    let err = generate(&inv, &opts()).unwrap_err();
    assert!(matches!(err, CdiError::NothingToDescribe { .. }), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("MIG mode is on without MIG devices on GPU 0 ("),
        "{msg}"
    );
    assert!(
        msg.contains("create MIG instances") && msg.contains("disable MIG mode"),
        "{msg}"
    );
}

#[test]
fn strategy_parsing() {
    assert_eq!(
        "type-index".parse::<NameStrategy>().unwrap(),
        NameStrategy::TypeIndex
    );
    assert_eq!(NameStrategy::Uuid.to_string(), "uuid");
    assert!("bus-id"
        .parse::<NameStrategy>()
        .unwrap_err()
        .to_string()
        .contains("type-index"));
}
