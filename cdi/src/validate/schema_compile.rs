//! Compiling the embedded schema documents into [`Node`]s (see the parent module for why only
//! eight keywords, and which).

use std::collections::HashMap;

use serde_json::{Map, Number, Value};

use super::JsonType;

/// Draft-07 validation keywords this interpreter does not implement: a schema using one is refused.
#[rustfmt::skip]
const UNSUPPORTED: &[&str] = &[
    "enum", "const", "multipleOf", "exclusiveMaximum", "exclusiveMinimum", "maxLength",
    "minLength", "pattern", "additionalItems", "maxItems", "minItems", "uniqueItems", "contains",
    "maxProperties", "minProperties", "additionalProperties", "dependencies", "propertyNames",
    "if", "then", "else", "allOf", "anyOf", "oneOf", "not", "format", "contentMediaType",
    "contentEncoding", "$id",
];

/// One compiled (sub)schema; other nodes are referred to by index.
#[derive(Debug, Default)]
pub(super) struct Node {
    /// `$ref`: in draft-07 it replaces every sibling keyword.
    pub(super) reference: Option<usize>,
    pub(super) types: Vec<JsonType>,
    pub(super) required: Vec<String>,
    pub(super) properties: Vec<(String, usize)>,
    /// `patternProperties` of the form `.{N,}`: N consecutive characters other than `\n`
    /// anywhere in the name (what the regex engines of boon and Go's CDI library match).
    pub(super) pattern_properties: Vec<(usize, usize)>,
    pub(super) items: Option<usize>,
    pub(super) minimum: Option<Number>,
    pub(super) maximum: Option<Number>,
}

/// Why the embedded schema does not compile (a bug of this crate, caught by its tests).
#[derive(Debug, thiserror::Error)]
pub(super) enum CompileError {
    #[error("{at}: keyword {keyword:?} is not implemented")]
    Unsupported { at: String, keyword: String },
    #[error("{at}: {what}")]
    Invalid { at: String, what: &'static str },
    #[error("document {doc} is not JSON: {error}")]
    Json { doc: &'static str, error: String },
}

/// The compiled schema: `nodes[0]` is `schema.json`'s root.
#[derive(Debug)]
pub(super) struct Compiled {
    pub(super) nodes: Vec<Node>,
}

/// Compiles the documents, resolving `$ref`s (memoised by target, so shared definitions compile
/// once and a reference cycle cannot recurse forever).
pub(super) struct Compiler {
    names: Vec<&'static str>,
    docs: Vec<Value>,
    nodes: Vec<Node>,
    refs: HashMap<(usize, String), usize>,
}

impl Compiler {
    /// Compiles `docs` (name, JSON text); the first one is the root.
    pub(super) fn compile(docs: &[(&'static str, &str)]) -> Result<Compiled, CompileError> {
        let names = docs.iter().map(|(name, _)| *name).collect();
        let docs = docs
            .iter()
            .map(|(doc, text)| {
                serde_json::from_str(text).map_err(|e| CompileError::Json {
                    doc,
                    error: e.to_string(),
                })
            })
            .collect::<Result<Vec<Value>, _>>()?;
        let mut c = Compiler {
            names,
            docs,
            nodes: Vec::new(),
            refs: HashMap::new(),
        };
        c.node_at(0, String::new())?;
        Ok(Compiled { nodes: c.nodes })
    }

    /// The node of the schema at JSON pointer `pointer` of document `doc`.
    fn node_at(&mut self, doc: usize, pointer: String) -> Result<usize, CompileError> {
        if let Some(&i) = self.refs.get(&(doc, pointer.clone())) {
            return Ok(i);
        }
        let i = self.nodes.len();
        self.nodes.push(Node::default());
        self.refs.insert((doc, pointer.clone()), i);
        let at = format!("{}#{pointer}", self.names.get(doc).unwrap_or(&""));
        let schema = self
            .docs
            .get(doc)
            .and_then(|d| d.pointer(&pointer))
            .and_then(Value::as_object)
            .cloned()
            .ok_or(CompileError::Invalid {
                at: at.clone(),
                what: "not a schema object",
            })?;
        let node = self.build(doc, &pointer, &at, &schema)?;
        if let Some(slot) = self.nodes.get_mut(i) {
            *slot = node;
        }
        Ok(i)
    }

    fn build(
        &mut self,
        doc: usize,
        pointer: &str,
        at: &str,
        schema: &Map<String, Value>,
    ) -> Result<Node, CompileError> {
        let invalid = |what| CompileError::Invalid {
            at: at.to_owned(),
            what,
        };
        if let Some(keyword) = schema.keys().find(|k| UNSUPPORTED.contains(&k.as_str())) {
            return Err(CompileError::Unsupported {
                at: at.to_owned(),
                keyword: keyword.clone(),
            });
        }
        let mut node = Node::default();
        if let Some(r) = schema.get("$ref") {
            let r = r.as_str().ok_or_else(|| invalid("$ref is not a string"))?;
            node.reference = Some(
                self.reference(doc, r)
                    .ok_or_else(|| invalid("bad $ref"))??,
            );
            return Ok(node);
        }
        for (keyword, value) in schema {
            let sub = |key: &str| format!("{pointer}/{keyword}{key}");
            match keyword.as_str() {
                "type" => node.types = types(value).ok_or_else(|| invalid("bad type"))?,
                "required" => {
                    node.required = strings(value).ok_or_else(|| invalid("bad required"))?
                }
                "minimum" => {
                    node.minimum = Some(number(value).ok_or_else(|| invalid("bad minimum"))?)
                }
                "maximum" => {
                    node.maximum = Some(number(value).ok_or_else(|| invalid("bad maximum"))?)
                }
                "items" => node.items = Some(self.node_at(doc, sub(""))?),
                "properties" | "patternProperties" => {
                    let map = value.as_object().ok_or_else(|| invalid("not an object"))?;
                    for name in map.keys() {
                        let child = self.node_at(doc, sub(&format!("/{}", escape(name))))?;
                        if keyword == "properties" {
                            node.properties.push((name.clone(), child));
                        } else {
                            let run =
                                min_run(name).ok_or_else(|| invalid("pattern is not .{N,}"))?;
                            node.pattern_properties.push((run, child));
                        }
                    }
                }
                _ => {} // annotations ($schema, description, definitions, …) and unknown keywords
            }
        }
        Ok(node)
    }

    /// `defs.json#/definitions/X` or `#/definitions/X` (in `doc`); `None` for any other form.
    fn reference(&mut self, doc: usize, r: &str) -> Option<Result<usize, CompileError>> {
        let (file, pointer) = r.split_once('#')?;
        let target = match file {
            "" => doc,
            f => self.names.iter().position(|name| *name == f)?,
        };
        Some(self.node_at(target, pointer.to_owned()))
    }
}

/// A JSON pointer token for `name` (RFC 6901).
fn escape(name: &str) -> String {
    name.replace('~', "~0").replace('/', "~1")
}

fn types(v: &Value) -> Option<Vec<JsonType>> {
    let names = match v {
        Value::String(s) => vec![s.clone()],
        other => strings(other)?,
    };
    let mut out: Vec<JsonType> = names
        .iter()
        .map(|n| {
            JsonType::NAMES
                .iter()
                .find(|(s, _)| s == n)
                .map(|(_, t)| *t)
        })
        .collect::<Option<_>>()?;
    out.sort();
    Some(out)
}

fn strings(v: &Value) -> Option<Vec<String>> {
    v.as_array()?
        .iter()
        .map(|s| s.as_str().map(str::to_owned))
        .collect()
}

fn number(v: &Value) -> Option<Number> {
    v.as_number().cloned()
}

/// N of the pattern `.{N,}`.
fn min_run(pattern: &str) -> Option<usize> {
    pattern.strip_prefix(".{")?.strip_suffix(",}")?.parse().ok()
}
