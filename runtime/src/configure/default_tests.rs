//! `--set-as-default` and privileged pods (issue #17.7): a default runtime with
//! `privileged_without_host_devices = true` gives every privileged pod of the node (CSI
//! drivers, GPU driver containers) an empty /dev, so configure refuses that combination.

use std::fs;

use super::*;

const V2: &str = "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n  runtime_type = \"io.containerd.runc.v2\"\n";

fn hides_host_devices(path: &Path) -> Option<bool> {
    let doc: DocumentMut = fs::read_to_string(path).unwrap().parse().unwrap();
    doc["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]["gpuhook"]
        ["privileged_without_host_devices"]
        .as_bool()
}

#[test]
fn set_as_default_hiding_host_devices_is_refused_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("config.toml");
    fs::write(&cfg, V2).unwrap();
    let opts = ConfigureOptions {
        config: cfg.clone(),
        set_as_default: true,
        ..Default::default()
    };
    let err = configure(&opts, false).unwrap_err();
    assert!(matches!(
        err,
        ConfigureError::DefaultHidesHostDevices { .. }
    ));
    let msg = err.to_string();
    for needed in [
        "privileged_without_host_devices",
        "CSI",
        "RuntimeClass",
        "--privileged-host-devices",
    ] {
        assert!(msg.contains(needed), "{needed:?} missing from: {msg}");
    }
    assert_eq!(fs::read_to_string(&cfg).unwrap(), V2, "nothing written");
    assert_eq!(
        fs::read_dir(dir.path()).unwrap().count(),
        1,
        "no backup either"
    );
}

#[test]
fn set_as_default_with_privileged_host_devices_gives_privileged_pods_the_host_devices() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("config.toml");
    fs::write(&cfg, V2).unwrap();
    let opts = ConfigureOptions {
        config: cfg.clone(),
        set_as_default: true,
        privileged_host_devices: true,
        ..Default::default()
    };
    assert_eq!(configure(&opts, false).unwrap().exit_code(), EXIT_CHANGED);
    assert_eq!(hides_host_devices(&cfg), Some(false));
    // Without --set-as-default the RuntimeClass runtime keeps hiding host devices.
    let plain = dir.path().join("plain.toml");
    fs::write(&plain, V2).unwrap();
    configure(
        &ConfigureOptions {
            config: plain.clone(),
            ..Default::default()
        },
        false,
    )
    .unwrap();
    assert_eq!(hides_host_devices(&plain), Some(true));
}
