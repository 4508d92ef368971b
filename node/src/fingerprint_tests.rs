use super::*;

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel.trim_start_matches('/'));
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

fn cap(minor: u32) -> String {
    format!("DeviceFileMinor: {minor}\nDeviceFileMode: 292\nDeviceFileModify: 1\n")
}

fn node(root: &Path) {
    write(
        root,
        PROC_VERSION,
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Tue\n",
    );
    write(
        root,
        "/proc/driver/nvidia/gpus/0000:1b:00.0/information",
        "Device Minor: 0\n",
    );
    write(root, "/proc/driver/nvidia/capabilities/mig/config", &cap(1));
    write(
        root,
        "/proc/driver/nvidia/capabilities/gpu0/mig/gi7/access",
        &cap(66),
    );
    write(
        root,
        "/proc/driver/nvidia/capabilities/gpu0/mig/gi7/ci0/access",
        &cap(67),
    );
}

#[test]
fn equal_state_equal_fingerprint_and_mig_caps_are_read() {
    let dir = tempfile::tempdir().unwrap();
    node(dir.path());
    let a = Fingerprint::take(dir.path()).unwrap();
    let b = Fingerprint::take(dir.path()).unwrap();
    assert_eq!(a, b);
    assert_eq!(a.driver_version().as_deref(), Some("580.159.04"));
    assert_eq!(
        a.mig_caps(),
        vec![
            MigCap {
                gpu_minor: 0,
                gi: 7,
                ci: None,
                cap_minor: 66
            },
            MigCap {
                gpu_minor: 0,
                gi: 7,
                ci: Some(0),
                cap_minor: 67
            },
        ]
    );
}

#[test]
fn a_repartition_and_a_driver_change_change_it() {
    let dir = tempfile::tempdir().unwrap();
    node(dir.path());
    let before = Fingerprint::take(dir.path()).unwrap();
    // The driver removes gi7 and creates gi1 with another CI.
    std::fs::remove_dir_all(
        dir.path()
            .join("proc/driver/nvidia/capabilities/gpu0/mig/gi7"),
    )
    .unwrap();
    write(
        dir.path(),
        "/proc/driver/nvidia/capabilities/gpu0/mig/gi1/access",
        &cap(12),
    );
    let after = Fingerprint::take(dir.path()).unwrap();
    assert_ne!(before, after);
    let changed = before.changed_paths(&after);
    assert!(
        changed.iter().any(|p| p.ends_with("gi7/access")),
        "{changed:?}"
    );
    assert!(
        changed.iter().any(|p| p.ends_with("gi1/access")),
        "{changed:?}"
    );
    write(
        dir.path(),
        PROC_VERSION,
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  590.1.2  Tue\n",
    );
    let upgraded = Fingerprint::take(dir.path()).unwrap();
    assert_eq!(
        after.changed_paths(&upgraded),
        vec![PROC_VERSION.to_string()]
    );
}

#[test]
fn a_missing_driver_is_an_empty_state_not_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let fp = Fingerprint::take(dir.path()).unwrap();
    assert!(fp.is_empty());
    assert_eq!(fp.driver_version(), None);
}

#[test]
fn reads_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    node(dir.path());
    let big = dir
        .path()
        .join("proc/driver/nvidia/capabilities/gpu0/mig/gi7/access");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(MAX_PROC_FILE_BYTES + 1)
        .unwrap();
    let err = Fingerprint::take(dir.path()).unwrap_err();
    assert!(err.to_string().contains("larger than the limit"), "{err}");
    std::fs::write(&big, cap(66)).unwrap();
    let gpus = dir.path().join("proc/driver/nvidia/gpus");
    for i in 0..=MAX_DIR_ENTRIES {
        std::fs::create_dir(gpus.join(format!("g{i}"))).unwrap();
    }
    let err = Fingerprint::take(dir.path()).unwrap_err();
    assert!(matches!(err, FingerprintError::TooMany { .. }), "{err}");
}

#[test]
fn mig_access_paths_parse() {
    assert_eq!(
        parse_mig_access_path("gpu3/mig/gi2/access"),
        Some((3, 2, None))
    );
    assert_eq!(
        parse_mig_access_path("gpu3/mig/gi2/ci1/access"),
        Some((3, 2, Some(1)))
    );
    assert_eq!(parse_mig_access_path("mig/config"), None);
    assert_eq!(parse_mig_access_path("gpu3/mig/gix/access"), None);
}
