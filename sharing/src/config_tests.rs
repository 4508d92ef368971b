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
