//! A JSON or YAML document read into a [`Value`] that refuses a key given twice in one object.
//!
//! `serde_json::Value` (and yaml_serde's reader into it) keeps the last of two equal keys, while the typed parse that the start
//! path uses in release builds refuses them ("duplicate field"). Validation reads through this so
//! `gpuhook cdi validate`, debug builds and release builds accept the same files, and a reader of
//! the file can never see a different `kind` or `hooks` than the one that counts. The error names
//! the key and the JSON path of its object, in the form the other validation errors use.

use std::cell::RefCell;
use std::fmt;

use serde::de::{DeserializeSeed, Error as _, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use gpuhook_node::bounded::cap_message;

use super::ValidationError;
use crate::spec::Format;

/// Parses `bytes` as `format`; a duplicate key is a [`ValidationError`] at its object's path.
pub(super) fn parse(bytes: &[u8], format: Format) -> Result<Value, ValidationError> {
    let duplicate = RefCell::new(None);
    let seed = StrictValue {
        path: String::new(),
        duplicate: &duplicate,
    };
    let parsed = match format {
        Format::Json => {
            let mut de = serde_json::Deserializer::from_slice(bytes);
            seed.deserialize(&mut de)
                .and_then(|v| de.end().map(|()| v))
                .map_err(|e| e.to_string())
        }
        Format::Yaml => seed
            .deserialize(yaml_serde::Deserializer::from_slice(bytes))
            .map_err(|e| e.to_string()),
    };
    match (parsed, duplicate.into_inner()) {
        (Ok(value), _) => Ok(value),
        (Err(_), Some(dup)) => Err(dup),
        (Err(e), None) => Err(ValidationError::new(
            "",
            cap_message(&format!("not a {} document: {e}", format.as_str())),
        )),
    }
}

struct StrictValue<'a> {
    /// Path of the value being read (`devices[0].containerEdits`); empty for the document.
    path: String,
    duplicate: &'a RefCell<Option<ValidationError>>,
}

impl StrictValue<'_> {
    fn child(&self, path: String) -> Self {
        StrictValue {
            path,
            duplicate: self.duplicate,
        }
    }
}

impl<'de> DeserializeSeed<'de> for StrictValue<'_> {
    type Value = Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for StrictValue<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    /// A YAML tag (`!name value`, or the non-specific `!`): the typed parse of the start path
    /// reads the value under it (a tag only picks an enum variant, and a spec has no enum), so
    /// validation does the same; refusing it here made the two disagree (found by fuzzing).
    fn visit_enum<A: serde::de::EnumAccess<'de>>(self, data: A) -> Result<Value, A::Error> {
        use serde::de::VariantAccess;
        let (_tag, content): (serde::de::IgnoredAny, _) = data.variant()?;
        content.newtype_variant_seed(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) =
            seq.next_element_seed(self.child(format!("{}[{}]", self.path, items.len())))?
        {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                let message = format!(
                    "key {} appears twice in this object; give each key once (a JSON reader \
                     would silently keep the last, gpuhook's start path refuses the spec)",
                    gpuhook_node::bounded::preview(&format!("{key:?}"))
                );
                *self.duplicate.borrow_mut() = Some(ValidationError::new(&self.path, message));
                return Err(A::Error::custom("duplicate key"));
            }
            let path = if self.path.is_empty() {
                key.clone()
            } else {
                format!("{}.{key}", self.path)
            };
            let value = map.next_value_seed(self.child(path))?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}
