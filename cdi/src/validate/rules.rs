//! The rules of the CDI spec text that the JSON schema does not express.

use std::cmp::Ordering;
use std::collections::BTreeSet;

use super::ValidationError;
use crate::names::{parse_kind, validate_device_name};
use crate::spec::{ContainerEdits, Spec};
use crate::version::{compare_versions, is_known_version, minimum_version_reason, KNOWN_VERSIONS};

/// Hook names a CDI hook may use (the OCI lifecycle points).
pub const HOOK_NAMES: &[&str] = &[
    "prestart",
    "createRuntime",
    "createContainer",
    "startContainer",
    "poststart",
    "poststop",
];

struct Errors(Vec<ValidationError>);

impl Errors {
    fn add(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.0.push(ValidationError::new(path, message));
    }
}

fn check_env(errs: &mut Errors, path: &str, env: &[String]) {
    for (i, e) in env.iter().enumerate() {
        match e.find('=') {
            Some(0) => errs.add(
                format!("{path}[{i}]"),
                format!("env entry {e:?} has an empty name"),
            ),
            None => errs.add(
                format!("{path}[{i}]"),
                format!("env entry {e:?} is not KEY=VALUE"),
            ),
            Some(_) => {}
        }
    }
}

fn absolute(errs: &mut Errors, path: String, what: &str, value: &str) {
    if !value.starts_with('/') {
        errs.add(path, format!("{what} {value:?} must be an absolute path"));
    }
}

fn check_edits(errs: &mut Errors, prefix: &str, e: &ContainerEdits) {
    check_env(errs, &format!("{prefix}.env"), &e.env);
    for (i, n) in e.device_nodes.iter().enumerate() {
        let p = format!("{prefix}.deviceNodes[{i}]");
        absolute(errs, format!("{p}.path"), "device node path", &n.path);
        if let Some(t) = n.device_type.as_deref() {
            if !matches!(t, "b" | "c" | "u" | "p") {
                errs.add(
                    format!("{p}.type"),
                    format!("device type {t:?} is not one of b, c, u, p"),
                );
            }
        }
        if let Some(perm) = n.permissions.as_deref() {
            if perm.chars().any(|c| !matches!(c, 'r' | 'w' | 'm')) {
                errs.add(
                    format!("{p}.permissions"),
                    format!("permissions {perm:?} may only contain r, w, m"),
                );
            }
        }
    }
    for (i, m) in e.mounts.iter().enumerate() {
        let p = format!("{prefix}.mounts[{i}]");
        if m.host_path.is_empty() {
            errs.add(format!("{p}.hostPath"), "mount hostPath is empty");
        }
        absolute(
            errs,
            format!("{p}.containerPath"),
            "mount containerPath",
            &m.container_path,
        );
    }
    for (i, h) in e.hooks.iter().enumerate() {
        let p = format!("{prefix}.hooks[{i}]");
        if !HOOK_NAMES.contains(&h.hook_name.as_str()) {
            errs.add(
                format!("{p}.hookName"),
                format!(
                    "hook name {:?} is not one of {}",
                    h.hook_name,
                    HOOK_NAMES.join(", ")
                ),
            );
        }
        absolute(errs, format!("{p}.path"), "hook path", &h.path);
        check_env(errs, &format!("{p}.env"), &h.env);
    }
    for (i, n) in e.net_devices.iter().enumerate() {
        let p = format!("{prefix}.netDevices[{i}]");
        if n.host_interface_name.is_empty() {
            errs.add(format!("{p}.hostInterfaceName"), "is empty");
        }
        if n.name.is_empty() {
            errs.add(format!("{p}.name"), "is empty");
        }
    }
}

/// DNS-1123 subdomain: lower-case labels of `[a-z0-9-]`, alphanumeric at both ends, <= 253.
fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
                && label.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
                && label
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        })
}

/// Annotation keys are Kubernetes qualified names: an optional DNS subdomain prefix and `/`, then
/// a name of at most 63 characters (`[A-Za-z0-9][-A-Za-z0-9_.]*[A-Za-z0-9]`).
fn check_annotations(
    errs: &mut Errors,
    path: &str,
    annotations: &std::collections::BTreeMap<String, String>,
) {
    for key in annotations.keys() {
        let (prefix_ok, name) = match key.split_once('/') {
            Some((prefix, name)) => (is_dns_subdomain(prefix), name),
            None => (true, key.as_str()),
        };
        let ok = prefix_ok
            && !name.is_empty()
            && name.len() <= 63
            && name.starts_with(|c: char| c.is_ascii_alphanumeric())
            && name.ends_with(|c: char| c.is_ascii_alphanumeric())
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !ok {
            errs.add(
                format!("{path}.{key}"),
                format!("annotation key {key:?} is not a valid qualified name ([prefix/]name)"),
            );
        }
    }
}

/// Every rule violation of `spec`.
pub(super) fn check(spec: &Spec) -> Vec<ValidationError> {
    let mut errs = Errors(Vec::new());
    if !is_known_version(&spec.cdi_version) {
        errs.add(
            "cdiVersion",
            format!(
                "unknown cdiVersion {:?} (known: {})",
                spec.cdi_version,
                KNOWN_VERSIONS.join(", ")
            ),
        );
    } else {
        let (need, why) = minimum_version_reason(spec);
        if compare_versions(&spec.cdi_version, need) == Ordering::Less {
            errs.add(
                "cdiVersion",
                format!(
                    "cdiVersion {} is too old: {why} needs {need}",
                    spec.cdi_version
                ),
            );
        }
    }
    if let Err(e) = parse_kind(&spec.kind) {
        errs.add("kind", e.to_string());
    }
    check_annotations(&mut errs, "annotations", &spec.annotations);
    if spec.devices.is_empty() {
        errs.add("devices", "a spec needs at least one device");
    }
    let mut names = BTreeSet::new();
    for (i, d) in spec.devices.iter().enumerate() {
        let p = format!("devices[{i}]");
        if let Err(e) = validate_device_name(&d.name) {
            errs.add(format!("{p}.name"), e.to_string());
        } else if !names.insert(d.name.as_str()) {
            errs.add(
                format!("{p}.name"),
                format!("device name {:?} is used twice", d.name),
            );
        }
        check_annotations(&mut errs, &format!("{p}.annotations"), &d.annotations);
        if d.container_edits.is_empty() {
            errs.add(
                format!("{p}.containerEdits"),
                "a device's containerEdits must not be empty",
            );
        }
        check_edits(
            &mut errs,
            &format!("{p}.containerEdits"),
            &d.container_edits,
        );
    }
    check_edits(&mut errs, "containerEdits", &spec.container_edits);
    errs.0
}
