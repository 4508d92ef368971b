//! Expectations from nvidia-container-toolkit v1.20.0: pkg/nvcdi/management.go
//! `newManagementDeviceDiscoverer` (patterns, `nodeIsBlocked`), gated.go `GetDeviceSpecs` (one
//! `all` device), lib-imex.go (one device per channel, named by its number), options.go
//! `getClassOrDefault`, internal/discover/gds.go (`/dev/nvidia-fs*`, `/etc/cufile.json`).

use super::*;
use crate::test_support::inventory;
use std::os::unix::fs::PermissionsExt;

fn mk(root: &Path, path: &str, minor: u64, mode: u32) {
    let host = root.join(path.trim_start_matches('/'));
    std::fs::create_dir_all(host.parent().unwrap()).unwrap();
    use nix::sys::stat::{makedev, mknod, Mode as M, SFlag};
    mknod(
        &host,
        SFlag::S_IFCHR,
        M::from_bits_truncate(0o600),
        makedev(195, minor),
    )
    .unwrap_or_else(|e| panic!("mknod {path} (tests run as root): {e}"));
    std::fs::set_permissions(&host, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn names(spec: &Spec) -> Vec<&str> {
    spec.devices.iter().map(|d| d.name.as_str()).collect()
}

fn paths(d: &Device) -> Vec<&str> {
    d.container_edits
        .device_nodes
        .iter()
        .map(|n| n.path.as_str())
        .collect()
}

#[test]
fn management_has_every_node_but_the_blocked_ones() {
    let dev = tempfile::tempdir().unwrap();
    let r = dev.path();
    for (p, minor) in [
        ("/dev/nvidia0", 0),
        ("/dev/nvidia3", 3),
        ("/dev/nvidiactl", 255),
        ("/dev/nvidia-fs0", 9),
        ("/dev/nvidia-nvswitch0", 8),
    ] {
        mk(r, p, minor, 0o666);
    }
    mk(r, "/dev/nvidia-caps/nvidia-cap1", 1, 0o400);
    let mut inv = inventory();
    inv.dev_root = r.to_path_buf();
    let spec = generate_mode(
        &inv,
        Mode::Management,
        &GenerateOptions::new("/usr/bin/gpuhook"),
    )
    .unwrap();
    assert_eq!(names(&spec), ["all"]);
    let all = &spec.devices[0];
    assert_eq!(
        paths(all),
        [
            "/dev/nvidia-caps/nvidia-cap1",
            "/dev/nvidia0",
            "/dev/nvidia3",
            "/dev/nvidiactl"
        ]
    );
    assert_eq!(all.container_edits.device_nodes[0].file_mode, Some(0o400));
    assert!(spec.container_edits.device_nodes.is_empty());
    assert!(
        !spec.container_edits.mounts.is_empty(),
        "driver files are common edits"
    );
}

#[test]
fn gated_modes_need_their_nodes() {
    let dev = tempfile::tempdir().unwrap();
    let r = dev.path();
    let mut inv = inventory();
    inv.dev_root = r.to_path_buf();
    let mut opts = GenerateOptions::new("/usr/bin/gpuhook");
    opts.class = Mode::Gds.default_class().into();
    let err = generate_mode(&inv, Mode::Gds, &opts)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("nvidia-fs*") && err.contains("no such device"),
        "{err}"
    );
    mk(r, "/dev/nvidia-fs0", 0, 0o666);
    mk(r, "/dev/nvidia-fs1", 1, 0o666);
    let spec = generate_mode(&inv, Mode::Gds, &opts).unwrap();
    assert_eq!(spec.kind, "nvidia.com/gds");
    assert_eq!(
        paths(&spec.devices[0]),
        ["/dev/nvidia-fs0", "/dev/nvidia-fs1"]
    );
    mk(r, "/dev/nvidia-caps-imex-channels/channel0", 0, 0o666);
    mk(r, "/dev/nvidia-caps-imex-channels/channel7", 7, 0o666);
    opts.class = Mode::Imex.default_class().into();
    let spec = generate_mode(&inv, Mode::Imex, &opts).unwrap();
    assert_eq!(spec.kind, "nvidia.com/imex-channel");
    assert_eq!(names(&spec), ["0", "7"]);
}
