use super::*;
use crate::spec::{ContainerEdits, Device, DeviceNode, Hook, Mount};

const GOOD: &[(&str, &[u8])] = &[
    (
        "minimal",
        include_bytes!("../../schema/testdata/good/minimal.json"),
    ),
    (
        "spec-example",
        include_bytes!("../../schema/testdata/good/spec-example.json"),
    ),
];
const BAD: &[(&str, &[u8])] = &[
    (
        "empty",
        include_bytes!("../../schema/testdata/bad/empty.json"),
    ),
    (
        "explicit-empty",
        include_bytes!("../../schema/testdata/bad/explicit-empty.json"),
    ),
];

#[test]
fn upstream_testdata() {
    for (name, bytes) in GOOD {
        validate_bytes(bytes, None).unwrap_or_else(|e| panic!("{name}: {}", join_errors(&e)));
    }
    for (name, bytes) in BAD {
        assert!(
            validate_bytes(bytes, None).is_err(),
            "{name} must be rejected"
        );
    }
    let errs = validate_bytes(b"{}", None).unwrap_err();
    assert!(
        errs.iter().all(|e| e.message.starts_with("schema:")),
        "{errs:?}"
    );
    assert!(join_errors(&errs).contains("cdiVersion"), "{errs:?}");
}

fn good() -> Spec {
    Spec {
        cdi_version: "0.5.0".into(),
        kind: "vendor.com/device".into(),
        devices: vec![
            Device {
                name: "dev0".into(),
                container_edits: ContainerEdits {
                    env: vec!["A=1".into()],
                    ..Default::default()
                },
                ..Default::default()
            },
            Device {
                name: "1".into(),
                container_edits: ContainerEdits {
                    device_nodes: vec![DeviceNode {
                        path: "/dev/card1".into(),
                        device_type: Some("c".into()),
                        permissions: Some("rw".into()),
                        ..Default::default()
                    }],
                    ..Default::default()
                },
                ..Default::default()
            },
        ],
        container_edits: ContainerEdits {
            mounts: vec![Mount {
                host_path: "/usr/lib/libv.so".into(),
                container_path: "/usr/lib/libv.so".into(),
                ..Default::default()
            }],
            hooks: vec![Hook {
                hook_name: "createContainer".into(),
                path: "/usr/bin/gpuhook".into(),
                env: vec!["PATH=/bin".into()],
                ..Default::default()
            }],
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Applies `f` to a good spec and returns the error paths.
fn bad(f: impl FnOnce(&mut Spec)) -> Vec<String> {
    let mut s = good();
    f(&mut s);
    let errs = validate_spec(&s).expect_err("must be rejected");
    errs.iter().map(|e| e.path.clone()).collect()
}

#[test]
fn good_spec_passes() {
    validate_spec(&good()).unwrap();
}

#[test]
fn model_validation_checks_the_rules_in_every_build() {
    super::validate_model(&good()).unwrap();
    let mut s = good();
    s.devices[0].name = "a/b".into();
    let errs = super::validate_model(&s).expect_err("rules apply in release builds too");
    assert_eq!(errs[0].path, "devices[0].name", "{errs:?}");
}

type Mutation = Box<dyn FnOnce(&mut Spec)>;

fn dn(s: &mut Spec) -> &mut DeviceNode {
    &mut s.devices[1].container_edits.device_nodes[0]
}

#[test]
fn each_rule_rejects() {
    let cases: Vec<(&str, Mutation)> = vec![
        ("cdiVersion", Box::new(|s| s.cdi_version = "0.9.9".into())),
        ("cdiVersion", Box::new(|s| s.cdi_version = "0.4.0".into())), // "1" needs 0.5.0
        ("kind", Box::new(|s| s.kind = "vendor.com".into())),
        ("kind", Box::new(|s| s.kind = "1vendor/dev".into())),
        ("devices", Box::new(|s| s.devices.clear())),
        (
            "devices[0].name",
            Box::new(|s| s.devices[0].name = "bad/name".into()),
        ),
        (
            "devices[1].name",
            Box::new(|s| s.devices[1].name = "dev0".into()),
        ),
        (
            "devices[0].containerEdits",
            Box::new(|s| s.devices[0].container_edits = ContainerEdits::default()),
        ),
        (
            "devices[0].containerEdits.env[0]",
            Box::new(|s| s.devices[0].container_edits.env[0] = "NOVALUE".into()),
        ),
        (
            "devices[0].containerEdits.env[0]",
            Box::new(|s| s.devices[0].container_edits.env[0] = "=x".into()),
        ),
        (
            "devices[1].containerEdits.deviceNodes[0].path",
            Box::new(|s| dn(s).path = "dev/card1".into()),
        ),
        (
            "devices[1].containerEdits.deviceNodes[0].type",
            Box::new(|s| dn(s).device_type = Some("x".into())),
        ),
        (
            "devices[1].containerEdits.deviceNodes[0].permissions",
            Box::new(|s| dn(s).permissions = Some("rwx".into())),
        ),
        (
            "containerEdits.mounts[0].containerPath",
            Box::new(|s| s.container_edits.mounts[0].container_path = "lib".into()),
        ),
        (
            "containerEdits.mounts[0].hostPath",
            Box::new(|s| s.container_edits.mounts[0].host_path.clear()),
        ),
        (
            "containerEdits.hooks[0].hookName",
            Box::new(|s| s.container_edits.hooks[0].hook_name = "preStart".into()),
        ),
        (
            "containerEdits.hooks[0].path",
            Box::new(|s| s.container_edits.hooks[0].path = "gpuhook".into()),
        ),
        (
            "containerEdits.hooks[0].env[0]",
            Box::new(|s| s.container_edits.hooks[0].env[0] = "PATH".into()),
        ),
        (
            "annotations.bad key!",
            Box::new(|s| {
                s.cdi_version = "0.6.0".into();
                s.annotations.insert("bad key!".into(), "v".into());
            }),
        ),
    ];
    for (path, f) in cases {
        let paths = bad(f);
        assert!(
            paths.iter().any(|p| p == path),
            "expected an error at {path}, got {paths:?}"
        );
    }
}

#[test]
fn annotation_keys_follow_the_kubernetes_rules() {
    for key in ["a/b/c", "Upper.com/x", "x.com/", "-x"] {
        let paths = bad(|s| {
            s.cdi_version = "0.6.0".into();
            s.devices[0].annotations.insert(key.into(), "v".into());
        });
        assert_eq!(paths, [format!("devices[0].annotations.{key}")], "{key}");
    }
    let mut ok = good();
    ok.cdi_version = "0.6.0".into();
    ok.annotations
        .insert("cdi.k8s.io/gpu_0".into(), "nvidia.com/gpu=0".into());
    validate_spec(&ok).unwrap();
}

#[test]
fn messages_name_the_problem() {
    let mut s = good();
    s.cdi_version = "0.3.0".into();
    let errs = validate_spec(&s).unwrap_err();
    assert_eq!(errs.len(), 1);
    assert_eq!(
        errs[0].to_string(),
        "cdiVersion: cdiVersion 0.3.0 is too old: a device name starts with a digit needs 0.5.0"
    );
}

#[test]
fn schema_errors_carry_json_paths() {
    let raw = br#"{"cdiVersion":"0.5.0","kind":"a.com/b","devices":[{"name":"x","containerEdits":{"deviceNodes":[{"path":"/dev/x","uid":-1}]}}]}"#;
    let errs = validate_bytes(raw, None).unwrap_err();
    assert!(
        errs.iter()
            .any(|e| e.path == "devices[0].containerEdits.deviceNodes[0].uid"),
        "{errs:?}"
    );
    let raw = br#"{"cdiVersion":"0.5.0","kind":"a.com/b","devices":[{"name":"x"}]}"#;
    let errs = validate_bytes(raw, None).unwrap_err();
    assert!(
        errs.iter()
            .any(|e| e.path == "devices[0]" && e.message.contains("containerEdits")),
        "{errs:?}"
    );
}

#[test]
fn unknown_fields_and_yaml() {
    let raw = br#"{"cdiVersion":"0.3.0","kind":"a.com/b","devices":[{"name":"x","containerEdits":{"env":["A=1"]},"extra":true}]}"#;
    let errs = validate_bytes(raw, None).unwrap_err();
    assert!(join_errors(&errs).contains("extra"), "{errs:?}");
    let yaml = b"cdiVersion: 0.3.0\nkind: a.com/b\ndevices:\n  - name: x\n    containerEdits:\n      env: [A=1]\n";
    let spec = validate_bytes(yaml, None).unwrap();
    assert_eq!(spec.devices[0].container_edits.env, ["A=1"]);
    let errs = validate_bytes(b"cdiVersion: [", Some(Format::Yaml)).unwrap_err();
    assert!(errs[0].message.contains("not a yaml document"), "{errs:?}");
}

#[test]
fn duplicate_keys_are_refused_with_key_and_path() {
    // serde_json::Value keeps the last duplicate; the typed (release start path) parse refuses
    // it. Validation must refuse it too, naming the key and where it is.
    let raw = br#"{"cdiVersion":"0.5.0","kind":"vendor.com/device","kind":"vendor.com/device","devices":[{"name":"a","containerEdits":{"env":["A=B"]}}]}"#;
    let errs = validate_bytes(raw, None).unwrap_err();
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(errs[0].path, "", "{errs:?}");
    assert!(
        errs[0].message.contains("key \"kind\" appears twice"),
        "{errs:?}"
    );
    let raw = br#"{"cdiVersion":"0.5.0","kind":"a.com/b","devices":[{"name":"a","containerEdits":{"env":["A=B"],"env":[]}}]}"#;
    let errs = validate_bytes(raw, None).unwrap_err();
    assert_eq!(errs[0].path, "devices[0].containerEdits", "{errs:?}");
    assert!(errs[0].message.contains("\"env\""), "{errs:?}");
    assert!(load_bytes(raw, None).is_err());
    // YAML mappings with a key twice are refused by the YAML reader already.
    let yaml = b"cdiVersion: 0.5.0\nkind: a.com/b\nkind: a.com/b\ndevices:\n  - name: x\n    containerEdits:\n      env: [A=1]\n";
    assert!(validate_bytes(yaml, None).is_err());
}

#[test]
fn parse_errors_quoting_a_hostile_value_are_capped() {
    let long = "x".repeat(6000);
    let json = format!(r#"{{"cdiVersion":"0.5.0","kind":"a.com/b","devices":"{long}"}}"#);
    let yaml = format!("cdiVersion: 0.5.0\nkind: a.com/b\ndevices: {long}\n");
    for (bytes, format) in [(json, Format::Json), (yaml, Format::Yaml)] {
        let err = crate::Spec::from_slice(bytes.as_bytes(), Some(format)).unwrap_err();
        let msg = err.to_string();
        assert!(msg.len() < 1200, "{format:?}: {} bytes", msg.len());
        assert!(msg.contains("bytes cut]"), "{msg}");
        for e in validate_bytes(bytes.as_bytes(), Some(format)).unwrap_err() {
            assert!(e.to_string().len() < 1200, "{format:?}: {e}");
        }
    }
    let err =
        validate_bytes(format!("{{\"a\": \"{long}").as_bytes(), Some(Format::Json)).unwrap_err();
    assert!(err[0].message.starts_with("not a json document"), "{err:?}");
}

#[test]
fn null_members_are_absent_as_in_the_runtimes_and_the_start_path() {
    // Go's encoding/json (the runtimes' CDI library) and our typed parse read a null member as an
    // absent one: validation agrees, so `cdi validate` never refuses what every consumer loads.
    // (YAML: an empty value is null, which yaml_serde gives a defaulted struct as an empty map.)
    let raw = b"cdiVersion: \"0.5.0\"\nkind: vendor.com/device\ndevices:\n  - name: a\n    containerEdits: {env: [A=B]}\ncontainerEdits:\n";
    let spec = validate_bytes(raw, None).expect("null members are absent");
    assert_eq!(
        spec,
        load_bytes(raw, None).expect("the start path loads it")
    );
    // A required member that is null is still missing; an unknown one is refused even when null
    // (the start path's typed parse refuses it).
    let raw = br#"{"cdiVersion":"0.5.0","kind":null,"devices":[{"name":"a","containerEdits":{"env":["A=B"]}}]}"#;
    assert!(validate_bytes(raw, None).is_err());
    let raw = b"cdiVersion: \"0.5.0\"\nkind: vendor.com/device\ndevices:\n  - name: a\n    containerEdits: {env: [A=B]}\n0tainerEdits:\n";
    assert!(validate_bytes(raw, None).is_err());
    assert!(load_bytes(raw, None).is_err());
}

#[test]
fn rule_messages_quoting_a_long_value_are_capped() {
    let vendor = "v".repeat(5000);
    let raw = format!(
        r#"{{"cdiVersion":"0.5.0","kind":"{vendor}.com/device","devices":[{{"name":"a","containerEdits":{{"env":["A=B"]}}}}]}}"#
    );
    let errs = validate_bytes(raw.as_bytes(), None).unwrap_err();
    assert!(errs.iter().all(|e| e.to_string().len() < 1200), "{errs:?}");
}

/// A YAML tag on a node (`! {…}`, `!x value`) is read through, as the typed start-path parse
/// reads it: `gpuhook cdi validate` and the start path accept the same file as the same spec
/// (the fuzzer's finding `corpus/cdi_spec/finding-yaml-tag-on-the-document`).
#[test]
fn a_yaml_tag_is_read_through_on_both_paths() {
    let json = String::from_utf8(good().to_bytes(Format::Json).unwrap()).unwrap();
    for tagged in [format!("! {json}"), format!("!custom {json}")] {
        let validated = validate_bytes(tagged.as_bytes(), Some(Format::Yaml)).unwrap();
        let loaded = crate::load_bytes(tagged.as_bytes(), Some(Format::Yaml)).unwrap();
        assert_eq!(validated, loaded);
        assert_eq!(validated, good());
    }
}
