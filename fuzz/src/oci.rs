//! The OCI inputs of the prestart hook and the runtime wrapper: `config.json` (written from an
//! image and a pod spec) and the state JSON a hook reads on stdin.

use std::path::Path;

use gpuhook::prestart::input::read_state;
use gpuhook::request::{mps_cdi_names, QualifiedName, RequestPolicy, NVIDIA_GPU_MPS_KIND};
use gpuhook_inject::BundleConfig;
use gpuhook_wrapper::remove_legacy_hooks;
use serde_json::Value;

use crate::check_message;
use crate::request::parse_checked;

/// The node policies a request is read under: the default, unprivileged env refused, and
/// volume-mount device lists accepted.
fn policies() -> [RequestPolicy; 3] {
    let base = RequestPolicy::default();
    [
        base.clone(),
        RequestPolicy {
            accept_envvar_when_unprivileged: false,
            ..base.clone()
        },
        RequestPolicy {
            accept_device_list_as_volume_mounts: true,
            ..base
        },
    ]
}

/// `config.json`: the request parser under every policy (see [`parse_checked`]), the MPS share
/// names, the bundle fields the hook uses (rootfs, user, device rules) and the wrapper's removal
/// of legacy GPU hooks.
pub fn config_json(data: &[u8]) {
    let bundle = Path::new("/run/bundle");
    match BundleConfig::parse(bundle, data) {
        Ok(b) => assert!(b.rootfs.is_absolute(), "rootfs {:?}", b.rootfs),
        Err(e) => check_message("BundleConfig::parse", &e),
    }
    let Ok(config) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    if !config.is_object() {
        return; // read_bundle_config refuses it before any parser runs
    }
    let policies = policies();
    let refused = parse_checked(&config, &policies[1]);
    let default = parse_checked(&config, &policies[0]);
    let _ = parse_checked(&config, &policies[2]);
    // Refusing unprivileged env requests can only take devices away.
    if default == Ok(None) {
        assert!(
            matches!(refused, Ok(None)),
            "refusing env added devices: {refused:?}"
        );
    }
    legacy_hooks(&config);
    match mps_cdi_names(&config, &policies[0]) {
        Ok(names) => {
            for (i, n) in names.iter().enumerate() {
                let q = QualifiedName::parse_reason(n)
                    .unwrap_or_else(|e| panic!("MPS name {n:?} does not parse: {e}"));
                assert!(q.is_kind(NVIDIA_GPU_MPS_KIND), "{n} is not an MPS share");
                assert!(!names[..i].contains(n), "{n} listed twice");
            }
        }
        Err(e) => check_message("mps_cdi_names", &e),
    }
}

/// The OCI state on a hook's stdin: accepted only with an absolute bundle; errors bounded.
pub fn state(data: &[u8]) {
    match read_state(data) {
        Ok(s) => assert!(s.bundle.is_absolute(), "bundle {:?}", s.bundle),
        Err(e) => check_message("read_state", &e),
    }
}

/// Removing legacy GPU hooks touches nothing but `hooks.prestart` (and the emptied containers),
/// removes exactly what it reports, and a second pass finds nothing.
fn legacy_hooks(config: &Value) {
    let mut once = config.clone();
    let removed = remove_legacy_hooks(&mut once);
    let prestart = |v: &Value| {
        v.pointer("/hooks/prestart")
            .and_then(Value::as_array)
            .map_or(0, Vec::len)
    };
    assert_eq!(prestart(config) - prestart(&once), removed.len());
    let mut twice = once.clone();
    assert_eq!(remove_legacy_hooks(&mut twice), Vec::<String>::new());
    assert_eq!(twice, once, "a second pass changed the spec");
    let without_hooks = |v: &Value| {
        let mut v = v.clone();
        v.as_object_mut().map(|o| o.remove("hooks"));
        v
    };
    assert_eq!(without_hooks(&once), without_hooks(config));
    for (key, value) in once
        .get("hooks")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        if key != "prestart" {
            assert_eq!(Some(value), config.get("hooks").and_then(|h| h.get(key)));
        }
    }
}
