//! The OCI inputs of the prestart hook and the runtime wrapper: `config.json` (written from an
//! image and a pod spec) and the state JSON a hook reads on stdin.

use std::path::Path;

use gpuhook::prestart::input::read_state;
use gpuhook::request::{mps_cdi_names, QualifiedName, RequestPolicy, NVIDIA_GPU_MPS_KIND};
use gpuhook_inject::BundleConfig;
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
/// names, and the bundle fields the hook uses (rootfs, user, device rules).
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
    match mps_cdi_names(&config) {
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
