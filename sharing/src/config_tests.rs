//! Typed reading with NVIDIA's parse-time defaults (the whole corpus runs in `tests/corpus.rs`).
use super::*;

#[test]
fn mps_fails_requests_greater_than_one_unless_told_not_to() {
    let c = parse("sharing: {mps: {resources: [{name: gpu, replicas: 2}]}}").unwrap();
    assert!(
        c.sharing
            .mps
            .as_ref()
            .unwrap()
            .fail_requests_greater_than_one
    );
    let c = parse("sharing: {mps: {failRequestsGreaterThanOne: false, resources: [{name: gpu, replicas: 2}]}}").unwrap();
    assert!(
        !c.sharing
            .mps
            .as_ref()
            .unwrap()
            .fail_requests_greater_than_one
    );
    let c = parse("sharing: {timeSlicing: {resources: [{name: gpu, replicas: 2}]}}").unwrap();
    assert!(
        !c.sharing
            .time_slicing
            .as_ref()
            .unwrap()
            .fail_requests_greater_than_one
    );
    assert_eq!(c.sharing.strategy(), SharingStrategy::TimeSlicing);
}

#[test]
fn rename_by_default_names_the_shared_resource() {
    let c = parse(
        "sharing: {timeSlicing: {renameByDefault: true, resources: [{name: gpu, replicas: 2}]}}",
    )
    .unwrap();
    let r = &c.sharing.time_slicing.as_ref().unwrap().resources[0];
    assert_eq!(r.full_name(), "nvidia.com/gpu");
    assert_eq!(r.rename.as_deref(), Some("nvidia.com/gpu.shared"));
}

#[test]
fn flags_take_a_string_or_a_list_of_strategies() {
    let c = parse("flags: {migStrategy: mixed, plugin: {deviceListStrategy: cdi-cri, deviceIDStrategy: index}}").unwrap();
    assert_eq!(c.flags.mig_strategy, Some(MigStrategy::Mixed));
    assert_eq!(
        c.flags.plugin.device_list_strategy,
        Some(vec![DeviceListStrategy::CdiCri])
    );
    assert_eq!(
        c.flags.plugin.device_id_strategy,
        Some(DeviceIdStrategy::Index)
    );
    let c = parse("flags: {plugin: {deviceListStrategy: [envvar, cdi-annotations]}}").unwrap();
    assert_eq!(
        c.flags.plugin.device_list_strategy,
        Some(vec![
            DeviceListStrategy::Envvar,
            DeviceListStrategy::CdiAnnotations
        ])
    );
    assert_eq!(parse("").unwrap(), Config::default());
}

#[test]
fn an_oversized_or_special_file_is_refused_naming_it_once() {
    let t = tempfile::tempdir().unwrap();
    let big = t.path().join("big.yaml");
    std::fs::write(
        &big,
        "#".repeat(usize::try_from(MAX_CONFIG_BYTES).unwrap() + 1),
    )
    .unwrap();
    let e = load(&big).unwrap_err().to_string();
    assert!(e.contains("larger than 1048576 bytes"), "{e}");
    assert_eq!(e.matches("big.yaml").count(), 1, "{e}");
    let fifo = t.path().join("fifo.yaml");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: `c` is a NUL-terminated path that lives across the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let e = load(&fifo).unwrap_err().to_string();
    assert!(e.contains("not a regular file"), "{e}");
    assert_eq!(e.matches("fifo.yaml").count(), 1, "{e}");
}

#[test]
fn names_get_the_nvidia_prefix_unless_they_have_it() {
    assert_eq!(full_resource_name("gpu"), "nvidia.com/gpu");
    assert_eq!(full_resource_name("nvidia.com/gpu"), "nvidia.com/gpu");
    // NewResourceName prefixes any other domain too, and the result is no DNS subdomain.
    assert_eq!(
        full_resource_name("example.com/gpu"),
        "nvidia.com/example.com/gpu"
    );
    let e = parse("sharing: {timeSlicing: {resources: [{name: example.com/gpu, replicas: 2}]}}")
        .unwrap_err()
        .to_string();
    assert!(e.contains("incorrect format for resource name"), "{e}");
}
