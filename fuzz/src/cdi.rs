//! CDI spec files (`gpuhook_cdi`): written by whoever may drop a file in `/etc/cdi` or
//! `/var/run/cdi`, read by the wrapper and the hook on every container start.

use gpuhook_cdi::{load_bytes, validate_bytes, Format, Spec, ValidationError};

use crate::check_message;

fn check_errors(what: &str, errors: &[ValidationError]) {
    assert!(!errors.is_empty(), "{what}: refused with no error");
    for e in errors {
        check_message(what, e);
    }
}

/// A spec file's bytes: errors are bounded; a valid spec prints (JSON and YAML) to bytes that
/// validate to the same spec; the start path (`load_bytes`: in release builds, for JSON, the typed
/// parse and the rules, no schema) and `gpuhook cdi validate` (`validate_bytes`) accept the same files, as
/// the same spec.
pub fn spec(data: &[u8]) {
    // The typed parse of the release start path (`load_bytes` without the schema; debug builds
    // validate first, so comparing with `load_bytes` alone would miss a release-only refusal).
    let typed = Spec::from_slice(data, None);
    if let Err(e) = &typed {
        check_message("Spec::from_slice", e);
    }
    let full = validate_bytes(data, None);
    let loaded = load_bytes(data, None);
    match (&full, &loaded) {
        (Err(e), Ok(_)) => panic!(
            "the start path accepts a spec that validation refuses: {}",
            gpuhook_cdi::validate::join_errors(e)
        ),
        (Ok(_), Err(e)) => panic!(
            "validation accepts a spec that the start path refuses: {}",
            gpuhook_cdi::validate::join_errors(e)
        ),
        (Ok(a), Ok(b)) => assert_eq!(a, b, "load_bytes and validate_bytes disagree"),
        (Err(_), Err(e)) => check_errors("load_bytes", e),
    }
    let spec = match full {
        Ok(spec) => spec,
        Err(errors) => return check_errors("validate_bytes", &errors),
    };
    match typed {
        Ok(t) => assert_eq!(t, spec, "the typed parse reads a valid spec differently"),
        Err(e) => panic!("validation accepts a spec that the release start path refuses: {e}"),
    }
    for format in [Format::Json, Format::Yaml] {
        let bytes = spec
            .to_bytes(format)
            .unwrap_or_else(|e| panic!("a valid spec does not serialise as {format:?}: {e}"));
        let again: Spec = validate_bytes(&bytes, Some(format)).unwrap_or_else(|e| {
            panic!(
                "a valid spec printed as {format:?} does not validate: {}\n{}",
                gpuhook_cdi::validate::join_errors(&e),
                String::from_utf8_lossy(&bytes)
            )
        });
        assert_eq!(again, spec, "{format:?} round trip changed the spec");
    }
}
