//! The env grammars of a container request: `NVIDIA_VISIBLE_DEVICES`, `NVIDIA_REQUIRE_*` and
//! `NVIDIA_DRIVER_CAPABILITIES` (`gpuhook::request`), as the prestart hook and the wrapper read
//! them from `process.env` of an image's config.

use std::collections::BTreeSet;

use gpuhook::request::{
    self, compare_versions, is_gpu_container, parse_capabilities, parse_expression, parse_id,
    parse_version, Constraint, DeviceSelection, ParseOutcome, QualifiedName, RequestPolicy,
    RequestSource, RequirementValue,
};
use gpuhook_node::Capability;
use serde_json::{json, Value};

use crate::{check_message, text};

/// The parser refused a config: its message (checked to be bounded), comparable between
/// policies where the parser's own error type is not.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

/// An OCI config whose process has exactly `env`.
pub fn config_with_env(env: &[String]) -> Value {
    json!({ "ociVersion": "1.2.0", "process": { "env": env } })
}

/// Parses `config` as the hook does, checking what holds for any config: the cheap pre-check
/// never skips a GPU container, errors are bounded, and the CDI names the wrapper derives parse.
/// `Ok(None)`: not a GPU container; `Err`: refused.
pub fn parse_checked(
    config: &Value,
    policy: &RequestPolicy,
) -> Result<Option<DeviceSelection>, Refused> {
    let outcome = request::parse(config, policy);
    if matches!(outcome, Ok(ParseOutcome::Gpu(_))) {
        assert!(
            is_gpu_container(config, policy),
            "is_gpu_container said no to a GPU container: {outcome:?}"
        );
    }
    match outcome {
        Err(e) => {
            check_message("request::parse", &e);
            Err(Refused(e.to_string()))
        }
        Ok(ParseOutcome::NotGpu(_)) => Ok(None),
        Ok(ParseOutcome::Gpu(req)) => {
            // What the wrapper asks the CDI registry for must be valid qualified names.
            if let Ok(names) = req.devices.to_cdi_names(&req.cdi_kind, req.source) {
                for n in names {
                    if let Err(e) = QualifiedName::parse_reason(&n) {
                        panic!("to_cdi_names gave {n:?}, not a CDI name: {e}");
                    }
                }
            }
            Ok(Some(req.devices))
        }
    }
}

/// `NVIDIA_VISIBLE_DEVICES=<input>`: parse, print the ids, parse again: same selection.
pub fn visible_devices(data: &[u8]) {
    let value = text(data);
    let policy = RequestPolicy::default();
    let config = config_with_env(&[format!("NVIDIA_VISIBLE_DEVICES={value}")]);
    let Ok(Some(selection)) = parse_checked(&config, &policy) else {
        return;
    };
    let printed = match &selection {
        DeviceSelection::None => "none".to_string(),
        DeviceSelection::All => "all".to_string(),
        DeviceSelection::Ids(ids) => {
            for id in ids {
                let again = parse_id(&id.to_string(), RequestSource::EnvVar)
                    .unwrap_or_else(|e| panic!("{id:?} printed as {id} does not parse: {e}"));
                assert_eq!(&again, id, "{id} does not round-trip");
            }
            ids.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(",")
        }
    };
    let config = config_with_env(&[format!("NVIDIA_VISIBLE_DEVICES={printed}")]);
    assert_eq!(
        parse_checked(&config, &policy),
        Ok(Some(selection.clone())),
        "{value:?} parsed, printed as {printed:?}, parsed differently"
    );
}

fn print_constraint(c: &Constraint) -> String {
    let term = |t: &gpuhook::request::Term| {
        t.factors
            .iter()
            .map(|f| {
                let value = match &f.value {
                    RequirementValue::Version(v) => {
                        v.iter().map(u64::to_string).collect::<Vec<_>>().join(".")
                    }
                    RequirementValue::Brand(b) => b.clone(),
                };
                format!("{}{}{value}", f.property.as_str(), f.op.as_str())
            })
            .collect::<Vec<_>>()
            .join(",")
    };
    c.terms.iter().map(term).collect::<Vec<_>>().join(" ")
}

/// Same meaning: properties, operators and values of every factor (not the text as written).
fn semantics(c: &Constraint) -> Vec<Vec<(&'static str, &'static str, RequirementValue)>> {
    c.terms
        .iter()
        .map(|t| {
            t.factors
                .iter()
                .map(|f| (f.property.as_str(), f.op.as_str(), f.value.clone()))
                .collect()
        })
        .collect()
}

/// `NVIDIA_REQUIRE_CUDA=<input>`: parse, print canonically, parse again: same constraint; version
/// comparison is antisymmetric; the full request parser agrees with the expression parser.
pub fn require(data: &[u8]) {
    let expr = text(data);
    let parsed = parse_expression("NVIDIA_REQUIRE_CUDA", &expr);
    let config = config_with_env(&[
        "NVIDIA_VISIBLE_DEVICES=all".into(),
        format!("NVIDIA_REQUIRE_CUDA={expr}"),
    ]);
    let full = request::parse(&config, &RequestPolicy::default());
    match (&parsed, &full) {
        (Err(e), Ok(_)) => panic!("parse_expression refused {expr:?} ({e}) but parse accepted it"),
        (Err(e), Err(_)) => check_message("parse_expression", e),
        (Ok(_), Err(e)) => panic!("parse_expression accepted {expr:?} but parse refused it: {e}"),
        (Ok(_), Ok(_)) => {}
    }
    let Ok(c) = parsed else { return };
    let printed = print_constraint(&c);
    let again = parse_expression("NVIDIA_REQUIRE_CUDA", &printed)
        .unwrap_or_else(|e| panic!("{expr:?} printed as {printed:?} does not parse: {e}"));
    assert_eq!(semantics(&again), semantics(&c), "{printed:?}");
    let versions: Vec<Vec<u64>> = c
        .terms
        .iter()
        .flat_map(|t| &t.factors)
        .filter_map(|f| match &f.value {
            RequirementValue::Version(v) => Some(v.clone()),
            RequirementValue::Brand(_) => None,
        })
        .collect();
    for a in &versions {
        let printed = a.iter().map(u64::to_string).collect::<Vec<_>>().join(".");
        assert_eq!(parse_version(&printed).as_ref(), Some(a));
        for b in &versions {
            assert_eq!(compare_versions(a, b), compare_versions(b, a).reverse());
        }
    }
}

/// `NVIDIA_DRIVER_CAPABILITIES=<input>`: the set is closed (video ⇒ compute, display ⇒
/// graphics), never empty, and prints back to itself.
pub fn capabilities(data: &[u8]) {
    let value = text(data);
    let set = match parse_capabilities(Some(&value), false) {
        Ok(set) => set,
        Err(e) => return check_message("parse_capabilities", &e),
    };
    assert!(!set.is_empty(), "{value:?} gave no capability");
    if set.contains(&Capability::Video) {
        assert!(set.contains(&Capability::Compute), "video without compute");
    }
    if set.contains(&Capability::Display) {
        assert!(
            set.contains(&Capability::Graphics),
            "display without graphics"
        );
    }
    let printed = set.iter().map(|c| c.as_str()).collect::<Vec<_>>().join(",");
    let again: BTreeSet<Capability> = parse_capabilities(Some(&printed), false)
        .unwrap_or_else(|e| panic!("{printed:?} does not parse: {e}"));
    assert_eq!(again, set, "{value:?} printed as {printed:?}");
}
