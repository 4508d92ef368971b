//! Tests of config parsing: the device-plugin shape, our section, errors naming keys.
use super::*;

#[test]
fn parses_device_plugin_shape_and_our_section() {
    let cfg = parse(
        r#"
version: v1
flags: { migStrategy: none }
sharing:
  mps:
    renameByDefault: true
    failRequestsGreaterThanOne: true
    resources:
      - name: nvidia.com/gpu
        replicas: 4
        devices: all
      - name: nvidia.com/gpu.big
        replicas: 2
        devices: ["3", 5, GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c]
      - name: x
        replicas: 2
        devices: 2
mpsDaemon:
  mpsRoot: /tmp/m
  shmSize: 1Gi
  probeInterval: 250ms
  commandTimeout: 2
  gpus:
    - device: 3
      activeThreadPercentage: 60
      pinnedMemoryLimitMiB: 1000
"#,
    )
    .unwrap();
    let mps = cfg.sharing.mps.unwrap();
    assert!(mps.rename_by_default && mps.fail_requests_greater_than_one);
    assert_eq!(mps.resources[0].devices, Devices::All);
    assert_eq!(
        mps.resources[1].devices,
        Devices::List(vec![
            DeviceId::Index(3),
            DeviceId::Index(5),
            DeviceId::Uuid("GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c".into())
        ])
    );
    assert_eq!(mps.resources[2].devices, Devices::Count(2));
    let d = cfg.mps_daemon;
    assert_eq!(d.shm_size, Some(ByteSize(1 << 30)));
    assert_eq!(
        d.probe_interval,
        Some(DurationValue(Duration::from_millis(250)))
    );
    assert_eq!(
        d.command_timeout,
        Some(DurationValue(Duration::from_secs(2)))
    );
    assert_eq!(d.gpus[0].pinned_memory_limit_mib, Some(1000));
}

#[test]
fn unknown_keys_warn_but_a_missing_required_key_fails_with_its_path() {
    // As NVIDIA's plugin: the typo `replica` is ignored (a warning), so `replicas` is missing.
    let err = parse(
        "version: v1\nsharing:\n  mps:\n    resources:\n      - name: a\n        replica: 2\n",
    )
    .unwrap_err()
    .to_string();
    assert_eq!(err, "sharing.mps.resources[0]: no replicas specified");
    let cfg = parse("version: v1\nnotAField: 1\n").unwrap();
    assert_eq!(cfg.warnings.len(), 1, "{:?}", cfg.warnings);
    // Our own section stays strict.
    let err = parse("mpsDaemon:\n  probeIntervall: 5s\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("mpsDaemon") && err.contains("unknown field `probeIntervall`"),
        "{err}"
    );
}

#[test]
fn bad_values_name_their_key() {
    let err = parse("version: v1\nmpsDaemon:\n  shmSize: lots\n")
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("mpsDaemon.shmSize:"), "{err}");
    let err = parse("version: v1\nmpsDaemon:\n  probeInterval: 5 parsecs\n")
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("mpsDaemon.probeInterval:"), "{err}");
    let err = parse(
        "version: v1\nsharing: {mps: {resources: [{name: a, replicas: 2, devices: some}]}}\n",
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.starts_with("sharing.mps.resources[0].devices:"),
        "{err}"
    );
}

#[test]
fn sizes_and_durations() {
    assert_eq!(parse_size("512Mi"), Some(512 << 20));
    assert_eq!(parse_size("2G"), Some(2 << 30));
    assert_eq!(parse_size("4096"), Some(4096));
    assert_eq!(parse_size("1X"), None);
    assert_eq!(parse_duration("1m"), Some(Duration::from_secs(60)));
    assert_eq!(parse_duration("ms"), None);
}

#[test]
fn an_oversized_or_special_config_file_is_refused_with_the_bound() {
    let t = tempfile::tempdir().unwrap();
    let big = t.path().join("big.yaml");
    let mut text = String::from("version: v1\n");
    while text.len() <= usize::try_from(MAX_CONFIG_BYTES).unwrap() {
        text.push_str("# padding padding padding padding padding padding padding padding\n");
    }
    std::fs::write(&big, &text).unwrap();
    let err = load(&big).unwrap_err().to_string();
    assert!(err.contains("larger than 1048576 bytes"), "{err}");
    assert!(err.contains("big.yaml"), "{err}");
    // A FIFO neither blocks nor is read.
    let fifo = t.path().join("fifo.yaml");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let err = load(&fifo).unwrap_err().to_string();
    assert!(err.contains("not a regular file"), "{err}");
}
