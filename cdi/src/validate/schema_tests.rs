//! The interpreter against boon, a complete JSON Schema validator, on the same embedded schema:
//! the same errors (path, message, order) for every field of a full spec set to every kind of
//! wrong value, or removed.
// Tests: a failed set-up step is the test's failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use serde_json::json;

/// boon's errors for `value`: its error tree's leaves, as the validator reported them before.
fn boon_errors(value: &Value) -> Vec<ValidationError> {
    fn leaves(e: &boon::ValidationError<'_, '_>, out: &mut Vec<ValidationError>) {
        if e.causes.is_empty() {
            let steps: Vec<Step<'_>> = e
                .instance_location
                .tokens
                .iter()
                .map(|t| match t {
                    boon::InstanceToken::Prop(p) => Step::Prop(p),
                    boon::InstanceToken::Item(i) => Step::Item(*i),
                })
                .collect();
            out.push(ValidationError::new(
                json_path(&steps),
                format!("schema: {}", e.kind),
            ));
        }
        for c in &e.causes {
            leaves(c, out);
        }
    }
    const BASE: &str = "https://cdi.gpuhook.invalid/schema/";
    let mut compiler = boon::Compiler::new();
    compiler.set_default_draft(boon::Draft::V7);
    for (name, text) in DOCS {
        let doc: Value = serde_json::from_str(text).unwrap();
        compiler
            .add_resource(&format!("{BASE}{name}"), doc)
            .unwrap();
    }
    let mut schemas = boon::Schemas::new();
    let index = compiler
        .compile(&format!("{BASE}schema.json"), &mut schemas)
        .unwrap();
    let mut out = Vec::new();
    if let Err(e) = schemas.validate(value, index) {
        leaves(&e, &mut out);
    }
    out
}

/// A spec with every member the schema describes.
fn full_spec() -> Value {
    let edits = json!({
        "env": ["A=1"],
        "deviceNodes": [{"path": "/dev/x", "hostPath": "/dev/x", "permissions": "rw", "type": "c",
                         "major": 195, "minor": 0, "uid": 0, "gid": 44}],
        "netDevices": [{"hostInterfaceName": "eth1", "name": "net0"}],
        "mounts": [{"hostPath": "/a", "containerPath": "/b", "options": ["ro"], "type": "bind"}],
        "hooks": [{"hookName": "createContainer", "path": "/bin/h", "args": ["h"], "env": ["E=1"],
                   "timeout": 5}],
        "intelRdt": {"closID": "c", "l3CacheSchema": "L3:0=f", "memBwSchema": "MB:0=50",
                     "schemata": ["L3:0=f"], "enableMonitoring": true},
        "additionalGids": [44]
    });
    json!({
        "cdiVersion": "0.8.0",
        "kind": "vendor.com/gpu",
        "annotations": {"a": "b"},
        "devices": [{"name": "0", "annotations": {"c": "d"}, "containerEdits": edits}],
        "containerEdits": edits
    })
}

/// Values of every JSON type, and numbers at and beyond the schema's bounds.
fn odd_values() -> Vec<Value> {
    vec![
        Value::Null,
        json!(true),
        json!(-1),
        json!(1.5),
        json!(2.0),
        json!(4294967295_u64),
        json!(4294967296_u64),
        json!(i64::MIN),
        json!(-9.3e18),
        json!(1e19),
        json!("s"),
        json!([]),
        json!(["s", 1]),
        json!({}),
        json!({"x": 1}),
    ]
}

/// Every variant of `v`: each member or element replaced by each odd value, or removed.
fn variants(v: &Value, out: &mut Vec<Value>) {
    let with = |f: &dyn Fn(&mut Value)| {
        let mut copy = v.clone();
        f(&mut copy);
        copy
    };
    match v {
        Value::Object(map) => {
            for (k, child) in map {
                out.push(with(&|c| {
                    c.as_object_mut().unwrap().remove(k);
                }));
                for odd in odd_values() {
                    out.push(with(&|c| c[k.as_str()] = odd.clone()));
                }
                let mut nested = Vec::new();
                variants(child, &mut nested);
                out.extend(
                    nested
                        .into_iter()
                        .map(|n| with(&|c| c[k.as_str()] = n.clone())),
                );
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                for odd in odd_values() {
                    out.push(with(&|c| c[i] = odd.clone()));
                }
                let mut nested = Vec::new();
                variants(child, &mut nested);
                out.extend(nested.into_iter().map(|n| with(&|c| c[i] = n.clone())));
            }
        }
        _ => {}
    }
}

#[test]
fn agrees_with_boon_on_every_field_of_a_full_spec() {
    let full = full_spec();
    assert_eq!(check(&full), Vec::new());
    let mut all = vec![json!({}), json!([]), json!("spec"), Value::Null];
    variants(&full, &mut all);
    // Odd annotation names: the `.{1,}` pattern property.
    for name in ["", "\n", "\n\nx", "é", "'q\"uote'"] {
        all.push(json!({"cdiVersion": "1", "kind": "k", "devices": [], "annotations": {name: 1}}));
    }
    assert!(all.len() > 1000, "{}", all.len());
    let mut failing = 0;
    for v in &all {
        let (ours, theirs) = (check(v), boon_errors(v));
        assert_eq!(ours, theirs, "for {v}");
        failing += usize::from(!ours.is_empty());
    }
    assert!(failing > all.len() / 2, "{failing} of {}", all.len());
}

#[test]
fn the_embedded_schema_compiles() {
    let compiled = Compiler::compile(&DOCS).unwrap();
    assert!(compiled.nodes.len() > 20, "{}", compiled.nodes.len());
    let missing = check(&json!({"devices": []}));
    assert_eq!(
        missing,
        vec![ValidationError::new(
            "",
            "schema: missing properties 'cdiVersion', 'kind'"
        )]
    );
}

#[test]
fn a_validation_keyword_it_does_not_implement_is_refused() {
    for (keyword, value) in [
        ("enum", json!(["a"])),
        ("additionalProperties", json!(false)),
    ] {
        let schema = json!({"type": "object", "properties": {"a": {keyword: value}}}).to_string();
        let err = Compiler::compile(&[("schema.json", &schema)]).unwrap_err();
        assert!(
            err.to_string()
                .contains(&format!("keyword {keyword:?} is not implemented")),
            "{err}"
        );
    }
    let bad_pattern = r#"{"patternProperties": {"^a+$": {}}}"#;
    let err = Compiler::compile(&[("schema.json", bad_pattern)]).unwrap_err();
    assert!(err.to_string().contains("pattern is not .{N,}"), "{err}");
    // An unknown keyword is not a validation keyword: ignored, as JSON Schema says.
    let typo = r##"{"items": {"ref": "#definitions/Env"}}"##;
    assert!(Compiler::compile(&[("schema.json", typo)]).is_ok());
}
