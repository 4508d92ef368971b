//! The upstream CDI JSON schema (draft-07), embedded and checked by a small interpreter of the
//! keywords it uses.
//!
//! Why not a general JSON Schema library: `boon`, used before (and still the independent check in
//! this module's tests and in the end-to-end suite), brings an ECMA regex engine with Unicode
//! tables whose ~7,000 pointer relocations and ~150 KB of relocated data every `gpuhook` start
//! paid, ~0.12 ms of a ~2 ms `gpuhook cdi generate` (`scripts/bench-cdi-generate.sh`), though
//! the start path never checks a spec against the schema. The schema uses eight keywords:
//! `$ref`, `type`, `required`, `properties`, `patternProperties` (one pattern, `.{1,}`),
//! `items`, `minimum` and `maximum`. This module implements exactly those, with boon's draft-07
//! semantics and messages (a differential test compares both on every field of a full spec), and
//! refuses to compile a schema that uses any other validation keyword: an upstream schema change
//! fails the tests instead of being checked halfway. Unknown keywords are ignored, as JSON Schema
//! says (the upstream `defs.json` has one, `"ref"`, a typo that leaves `env` items unchecked).
//!
//! `schema.json` refers to `defs.json` by a relative `$ref`; nothing is ever fetched.

use std::sync::OnceLock;

use serde_json::{Map, Number, Value};

use super::ValidationError;

#[path = "schema_compile.rs"]
mod compile;
use compile::{Compiled, Compiler, Node};

const SCHEMA_JSON: &str = include_str!("../../schema/schema.json");
const DEFS_JSON: &str = include_str!("../../schema/defs.json");
/// The documents: the first is the root, the second is what it refers to.
const DOCS: [(&str, &str); 2] = [("schema.json", SCHEMA_JSON), ("defs.json", DEFS_JSON)];

/// JSON types, in the order boon lists several in a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum JsonType {
    Null,
    Boolean,
    Number,
    Integer,
    String,
    Array,
    Object,
}

impl JsonType {
    pub(super) const NAMES: [(&'static str, JsonType); 7] = [
        ("null", JsonType::Null),
        ("boolean", JsonType::Boolean),
        ("number", JsonType::Number),
        ("integer", JsonType::Integer),
        ("string", JsonType::String),
        ("array", JsonType::Array),
        ("object", JsonType::Object),
    ];

    fn of(v: &Value) -> Self {
        match v {
            Value::Null => JsonType::Null,
            Value::Bool(_) => JsonType::Boolean,
            Value::Number(_) => JsonType::Number,
            Value::String(_) => JsonType::String,
            Value::Array(_) => JsonType::Array,
            Value::Object(_) => JsonType::Object,
        }
    }

    fn name(self) -> &'static str {
        Self::NAMES
            .iter()
            .find(|(_, t)| *t == self)
            .map_or("", |(n, _)| n)
    }
}

fn compiled() -> &'static Compiled {
    static SCHEMA: OnceLock<Compiled> = OnceLock::new();
    // The embedded files are part of this crate and covered by tests: failing here is a bug.
    SCHEMA.get_or_init(|| Compiler::compile(&DOCS).expect("embedded CDI schema compiles"))
}

/// A step of an instance location.
#[derive(Debug, Clone, Copy)]
enum Step<'v> {
    Prop(&'v str),
    Item(usize),
}

/// `devices[3].containerEdits` from an instance location.
fn json_path(steps: &[Step<'_>]) -> String {
    let mut out = String::new();
    for s in steps {
        match s {
            Step::Prop(p) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(p);
            }
            Step::Item(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// `'name'`, quoted as boon quotes property names.
fn quote(s: &str) -> String {
    let debug = format!("{s:?}").replace("\\\"", "\"").replace('\'', "\\'");
    let inner = debug
        .strip_prefix('"')
        .and_then(|d| d.strip_suffix('"'))
        .unwrap_or(&debug);
    format!("'{inner}'")
}

/// Whether `v` (of type `t`) is one of `types` (none: any); an integral number is an integer.
fn type_matches(types: &[JsonType], t: JsonType, v: &Value) -> bool {
    types.is_empty() || types.contains(&t) || (types.contains(&JsonType::Integer) && is_integer(v))
}

fn is_integer(v: &Value) -> bool {
    matches!(v, Value::Number(n)
        if n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0))
}

/// Whether `name` has `run` consecutive characters other than `\n`.
fn has_run(name: &str, run: usize) -> bool {
    run == 0
        || name
            .split('\n')
            .any(|part| part.chars().nth(run - 1).is_some())
}

/// Walks an instance against the compiled schema, collecting errors in boon's order.
struct Walk<'s, 'v> {
    nodes: &'s [Node],
    at: Vec<Step<'v>>,
    out: Vec<ValidationError>,
}

impl<'v> Walk<'_, 'v> {
    fn error(&mut self, message: String) {
        self.out.push(ValidationError::new(
            json_path(&self.at),
            format!("schema: {message}"),
        ));
    }

    fn check(&mut self, node: usize, v: &'v Value) {
        let nodes = self.nodes;
        let Some(n) = nodes.get(node) else {
            return;
        };
        if let Some(r) = n.reference {
            return self.check(r, v);
        }
        let t = JsonType::of(v);
        if !type_matches(&n.types, t, v) {
            let want: Vec<&str> = n.types.iter().map(|t| t.name()).collect();
            return self.error(format!("want {}, but got {}", want.join(" or "), t.name()));
        }
        match v {
            Value::Object(obj) => self.object(n, obj),
            Value::Array(items) => {
                if let Some(item) = n.items {
                    for (i, v) in items.iter().enumerate() {
                        self.nested(Step::Item(i), item, v);
                    }
                }
            }
            Value::Number(num) => self.number(n, num),
            _ => {}
        }
    }

    fn nested(&mut self, step: Step<'v>, node: usize, v: &'v Value) {
        self.at.push(step);
        self.check(node, v);
        self.at.pop();
    }

    fn object(&mut self, n: &Node, obj: &'v Map<String, Value>) {
        let missing: Vec<String> = n
            .required
            .iter()
            .filter(|r| !obj.contains_key(r.as_str()))
            .map(|r| quote(r))
            .collect();
        if !missing.is_empty() {
            self.error(format!("missing properties {}", missing.join(", ")));
        }
        for (name, value) in obj {
            if let Some((_, child)) = n.properties.iter().find(|(p, _)| p == name) {
                self.nested(Step::Prop(name), *child, value);
            }
            for (run, child) in &n.pattern_properties {
                if has_run(name, *run) {
                    self.nested(Step::Prop(name), *child, value);
                }
            }
        }
    }

    /// `minimum`/`maximum`, compared in floating point as boon does.
    fn number(&mut self, n: &Node, num: &Number) {
        let got = num.as_f64();
        if let (Some(min), Some(g)) = (n.minimum.as_ref(), got) {
            if min.as_f64().is_some_and(|m| g < m) {
                self.error(format!("must be >={min}, but got {num}"));
            }
        }
        if let (Some(max), Some(g)) = (n.maximum.as_ref(), got) {
            if max.as_f64().is_some_and(|m| g > m) {
                self.error(format!("must be <={max}, but got {num}"));
            }
        }
    }
}

/// Errors of `value` against the CDI schema (empty when it conforms).
pub(super) fn check(value: &Value) -> Vec<ValidationError> {
    let mut walk = Walk {
        nodes: &compiled().nodes,
        at: Vec::new(),
        out: Vec::new(),
    };
    walk.check(0, value);
    walk.out
}

#[cfg(test)]
#[path = "schema_tests.rs"]
mod tests;
