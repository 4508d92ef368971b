//! Validation of CDI specs: the official JSON schema *and* the rules of the spec text.
//!
//! The upstream schema is permissive (any `cdiVersion`, unchecked env entries, no name rules), so
//! passing it says little; the rules module adds what the CDI library checks when a runtime loads
//! a spec. Both report errors with the JSON path of the offending value
//! (`devices[3].containerEdits.deviceNodes[0].path`), so a user can find it in the file.

mod rules;
mod schema;
mod strict;

use std::fmt;

use gpuhook_node::bounded::cap_message;

use crate::spec::{Format, Spec};

/// One problem found in a spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationError {
    /// JSON path of the offending value (`devices[0].name`); empty for the whole document.
    pub path: String,
    pub message: String,
}

impl ValidationError {
    /// Path and message are capped here, for every rule: rules quote the spec author's values.
    pub(crate) fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        ValidationError {
            path: cap_message(&path.into()),
            message: cap_message(&message.into()),
        }
    }
}

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

impl std::error::Error for ValidationError {}

/// Joins errors for a one-line message.
pub fn join_errors(errors: &[ValidationError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Checks a spec model against the JSON schema and the CDI rules.
pub fn validate_spec(spec: &Spec) -> Result<(), Vec<ValidationError>> {
    let value = serde_json::to_value(spec).map_err(|e| {
        vec![ValidationError::new(
            "",
            format!("cannot serialise spec: {e}"),
        )]
    })?;
    let mut errors = schema::check(&value);
    errors.extend(rules::check(spec));
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// Checks a spec built with this crate's typed model (the generator's output, what
/// [`crate::write_spec`] is given): the CDI rules always, the JSON schema in debug builds only.
///
/// The model already fixes what the schema checks (types, required fields, value ranges), so
/// release builds skip it here (a `gpuhook cdi generate` run need not compile it) while every
/// debug build, every unit test and the end-to-end tests (an independent validator on the schema
/// files) still check it. Specs read from disk always go
/// through [`validate_bytes`], schema included.
pub fn validate_model(spec: &Spec) -> Result<(), Vec<ValidationError>> {
    if cfg!(debug_assertions) {
        return validate_spec(spec);
    }
    let errors = rules::check(spec);
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// Parses and checks a spec file's bytes (`format` `None`: sniffed). Returns the parsed spec.
/// Fields unknown to the CDI model are errors, as in the runtimes.
pub fn validate_bytes(bytes: &[u8], format: Option<Format>) -> Result<Spec, Vec<ValidationError>> {
    let format = format.unwrap_or_else(|| Format::sniff(bytes));
    let value = strict::parse(bytes, format).map_err(|e| vec![e])?;
    // The schema sees the file without null members, as the runtimes read them; the typed parse
    // is the start path's own (an unknown member is refused even when null).
    let mut without_nulls = value;
    drop_null_members(&mut without_nulls);
    let errors = schema::check(&without_nulls);
    if !errors.is_empty() {
        return Err(errors);
    }
    let spec = Spec::from_slice(bytes, Some(format))
        .map_err(|e| vec![ValidationError::new("", cap_message(&e.to_string()))])?;
    let errors = rules::check(&spec);
    if errors.is_empty() {
        Ok(spec)
    } else {
        Err(errors)
    }
}

/// Removes every object member whose value is `null`, at any depth. The runtimes' CDI library
/// (Go's encoding/json) and our typed start-path parse read `"containerEdits": null` as an absent
/// member, while the JSON schema refuses a null object: validation must judge the spec the way it
/// will be used, not refuse a file that every runtime accepts.
fn drop_null_members(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            map.retain(|_, v| !v.is_null());
            map.values_mut().for_each(drop_null_members);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(drop_null_members),
        _ => {}
    }
}

/// Parses a spec file's bytes for *use* (the registry on a container's start path): typed parsing
/// (unknown fields rejected) plus [`validate_model`]. For a JSON file a release build skips the
/// JSON schema (the typed model already fixes what it checks); `gpuhook cdi validate` still
/// applies it. A YAML file always goes through [`validate_bytes`]: YAML's typed and generic
/// readings differ at the edges (an empty scalar with a `!!` tag is an empty struct to the typed
/// parse and a string to the generic one; found by fuzzing), and a spec must never be used in a
/// way `gpuhook cdi validate` refuses. gpuhook's own specs are JSON; YAML ones (NVIDIA's
/// `nvidia.yaml`) pay one more parse.
pub fn load_bytes(bytes: &[u8], format: Option<Format>) -> Result<Spec, Vec<ValidationError>> {
    let format = format.unwrap_or_else(|| Format::sniff(bytes));
    if cfg!(debug_assertions) || format == Format::Yaml {
        return validate_bytes(bytes, Some(format));
    }
    let spec = Spec::from_slice(bytes, Some(format))
        .map_err(|e| vec![ValidationError::new("", e.to_string())])?;
    validate_model(&spec)?;
    Ok(spec)
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
