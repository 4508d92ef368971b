//! JSON that keeps its keys in file order: an admin's `daemon.json` is edited, not re-sorted.
//!
//! serde_json's own `Map` sorts keys unless its `preserve_order` feature is on, and features are
//! unified across the workspace (turning it on here would change every crate's JSON output). So
//! this small value type is read through serde's visitor, which sees an object's entries in file
//! order, and written back through the same visitor order. Numbers keep serde_json's
//! representation. Duplicate keys are refused: dockerd would keep the last one and an edit of the
//! first would silently not apply.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};

/// A JSON value with object entries in file order.
#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    Null,
    Bool(bool),
    Number(serde_json::Number),
    String(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

impl Json {
    /// The value of `key` in an object.
    pub fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Object(entries) => entries.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The entries of an object (`None` for any other value).
    pub fn as_object_mut(&mut self) -> Option<&mut Vec<(String, Json)>> {
        match self {
            Json::Object(entries) => Some(entries),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Json::String(s) => Some(s),
            _ => None,
        }
    }

    /// The text with `indent` per level, one entry a line, and a final newline.
    pub fn to_pretty(&self, indent: &str) -> String {
        let mut out = Vec::new();
        let fmt = serde_json::ser::PrettyFormatter::with_indent(indent.as_bytes());
        let mut ser = serde_json::Serializer::with_formatter(&mut out, fmt);
        // Writing into a Vec cannot fail, nor can serialising strings, numbers and containers.
        let _ = self.serialize(&mut ser);
        let mut s = String::from_utf8_lossy(&out).into_owned();
        s.push('\n');
        s
    }
}

/// Sets `key` in `entries`: in place when present (keeping its position), else appended.
pub fn set(entries: &mut Vec<(String, Json)>, key: &str, value: Json) {
    match entries.iter_mut().find(|(k, _)| k == key) {
        Some((_, v)) => *v = value,
        None => entries.push((key.to_string(), value)),
    }
}

/// The indentation of the first indented line of `text` (spaces or tabs), else four spaces
/// (what `nvidia-ctk runtime configure` writes: Go's `json.MarshalIndent(c, "", "    ")`).
pub fn detect_indent(text: &str) -> String {
    text.lines()
        .skip(1)
        .map(|l| {
            let n = l.len() - l.trim_start_matches([' ', '\t']).len();
            &l[..n]
        })
        .find(|i| !i.is_empty())
        .unwrap_or("    ")
        .to_string()
}

/// Parses `text`; the error is serde_json's message (line and column).
pub fn parse(text: &str) -> Result<Json, String> {
    serde_json::from_str(text).map_err(|e| e.to_string())
}

impl Serialize for Json {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Json::Null => s.serialize_unit(),
            Json::Bool(b) => s.serialize_bool(*b),
            Json::Number(n) => n.serialize(s),
            Json::String(v) => s.serialize_str(v),
            Json::Array(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Json::Object(entries) => {
                let mut map = s.serialize_map(Some(entries.len()))?;
                for (k, v) in entries {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
        }
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_unit<E>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }
    fn visit_bool<E>(self, v: bool) -> Result<Json, E> {
        Ok(Json::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Json, E> {
        Ok(Json::Number(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Json, E> {
        Ok(Json::Number(v.into()))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Json, E> {
        serde_json::Number::from_f64(v)
            .map(Json::Number)
            .ok_or_else(|| E::custom("a number JSON cannot hold"))
    }
    fn visit_str<E>(self, v: &str) -> Result<Json, E> {
        Ok(Json::String(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Json, E> {
        Ok(Json::String(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Json::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
        let mut entries: Vec<(String, Json)> = Vec::new();
        while let Some((k, v)) = map.next_entry::<String, Json>()? {
            if entries.iter().any(|(seen, _)| *seen == k) {
                return Err(de::Error::custom(format!(
                    "duplicate key {k:?} (dockerd would use only the last one): remove one"
                )));
            }
            entries.push((k, v));
        }
        Ok(Json::Object(entries))
    }
}

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Json, D::Error> {
        d.deserialize_any(JsonVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_keep_their_order_and_duplicates_are_refused() {
        let text = "{\n  \"z\": 1,\n  \"a\": {\"y\": [true, null, 1.5], \"b\": \"s\"}\n}\n";
        let v = parse(text).unwrap();
        assert_eq!(
            v.to_pretty("  "),
            "{\n  \"z\": 1,\n  \"a\": {\n    \"y\": [\n      true,\n      null,\n      1.5\n    ],\n    \"b\": \"s\"\n  }\n}\n"
        );
        assert_eq!(detect_indent(text), "  ");
        assert_eq!(detect_indent("{}"), "    ");
        assert_eq!(detect_indent("{\n\t\"a\": 1\n}"), "\t");
        let err = parse("{\"a\": 1, \"a\": 2}").unwrap_err();
        assert!(err.contains("duplicate key \"a\""), "{err}");
        assert!(parse("{\"a\": ").is_err());
    }

    #[test]
    fn set_replaces_in_place_or_appends() {
        let mut e = vec![("a".to_string(), Json::Null), ("b".to_string(), Json::Null)];
        set(&mut e, "a", Json::Bool(true));
        set(&mut e, "c", Json::Bool(false));
        let keys: Vec<&str> = e.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["a", "b", "c"]);
        assert_eq!(e[0].1, Json::Bool(true));
    }
}
