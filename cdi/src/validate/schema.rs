//! The upstream CDI JSON schema (draft-07), embedded and compiled once with `boon`.
//!
//! `schema.json` refers to `defs.json` by a relative `$ref`, so both are registered as resources
//! under one made-up base URL; nothing is ever fetched.

use std::sync::OnceLock;

use boon::{Compiler, Draft, InstanceToken, SchemaIndex, Schemas};
use serde_json::Value;

use super::ValidationError;

const SCHEMA_JSON: &str = include_str!("../../schema/schema.json");
const DEFS_JSON: &str = include_str!("../../schema/defs.json");
const BASE: &str = "https://cdi.gpuhook.invalid/schema/";

fn compiled() -> &'static (Schemas, SchemaIndex) {
    static SCHEMA: OnceLock<(Schemas, SchemaIndex)> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        // The embedded files are part of this crate and covered by tests: failing here is a bug.
        let parse =
            |s: &str| serde_json::from_str::<Value>(s).expect("embedded CDI schema is JSON");
        let mut compiler = Compiler::new();
        compiler.set_default_draft(Draft::V7);
        let main = format!("{BASE}schema.json");
        compiler
            .add_resource(&main, parse(SCHEMA_JSON))
            .expect("schema.json resource");
        compiler
            .add_resource(&format!("{BASE}defs.json"), parse(DEFS_JSON))
            .expect("defs.json resource");
        let mut schemas = Schemas::new();
        let index = compiler
            .compile(&main, &mut schemas)
            .expect("embedded CDI schema compiles");
        (schemas, index)
    })
}

/// `devices[3].containerEdits` from boon's instance location.
fn json_path(tokens: &[InstanceToken<'_>]) -> String {
    let mut out = String::new();
    for t in tokens {
        match t {
            InstanceToken::Prop(p) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(p);
            }
            InstanceToken::Item(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

fn leaves(e: &boon::ValidationError<'_, '_>, out: &mut Vec<ValidationError>) {
    if e.causes.is_empty() {
        out.push(ValidationError::new(
            json_path(&e.instance_location.tokens),
            format!("schema: {}", e.kind),
        ));
    } else {
        for c in &e.causes {
            leaves(c, out);
        }
    }
}

/// Errors of `value` against the CDI schema (empty when it conforms).
pub(super) fn check(value: &Value) -> Vec<ValidationError> {
    let (schemas, index) = compiled();
    let mut out = Vec::new();
    if let Err(e) = schemas.validate(value, *index) {
        leaves(&e, &mut out);
    }
    out
}
