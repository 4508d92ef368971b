//! The mock `libnvidia-ml.so.1` seen through a real NVML consumer.
//!
//! `nvml-wrapper` is compiled against NVIDIA's `nvml.h` (via `nvml-wrapper-sys`), so driving the
//! mock with it checks the C ABI (symbol names, struct layouts, enum values) as well as the data.
//! Every node profile is installed the way the materialiser does it (`libnvidia-ml.so.<ver>`, a
//! `libnvidia-ml.so.1` symlink, the profile beside them) in its own temp dir; each dir holds its
//! own *copy* of the library, so each is an independent load with its own NVML state. MIG calls
//! that `nvml-wrapper` does not wrap, and calls before init, go through raw `dlsym` lookups.
//! No root needed.

// Integration tests: a failed unwrap or expect is the test failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "mock_nvml/support.rs"]
mod support;

#[path = "mock_nvml/instances.rs"]
mod instances;

#[path = "mock_nvml/node.rs"]
mod node;

use node::{check_identity, check_lookups, check_mig_devices, check_mig_off, check_system};
use nvml_wrapper::enum_wrappers::device::ComputeMode;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;
use support::{install, own_profiles, Raw, ALL_PROFILES};
use support::{INVALID_ARGUMENT, NOT_SUPPORTED, SUCCESS, UNINITIALIZED};

const MIB: u64 = 1024 * 1024;

fn check_node(name: &str, text: &str) {
    let node = install(text);
    let p = &node.profile;
    let nvml = node.nvml();
    let raw = Raw::open(&node.lib);
    check_system(name, &nvml, p);
    for g in &p.gpus {
        let what = format!("{name} GPU {}", g.index);
        let dev = nvml.device_by_index(g.index).expect("device by index");
        check_identity(&what, &dev, g);
        check_lookups(&what, &nvml, g);
        // SAFETY: the handle is only passed back to the library that issued it.
        let handle = unsafe { dev.handle() }.cast::<std::ffi::c_void>();
        if check_mig_off(&what, &raw, &dev, handle, g) {
            continue;
        }
        check_mig_devices(&what, &nvml, &raw, &dev, handle, g);
    }
}

#[test]
fn every_builtin_profile_matches_nvml() {
    let profiles = support::builtin_profiles();
    for (name, text) in &profiles {
        check_node(name, text);
    }
    let names: Vec<&str> = profiles.iter().map(|(n, _)| n.as_str()).collect();
    let missing: Vec<&&str> = ALL_PROFILES.iter().filter(|n| !names.contains(n)).collect();
    assert!(
        missing.is_empty(),
        "built-in profiles missing from sim/profiles: {missing:?}"
    );
}

#[test]
fn own_profiles_match_nvml() {
    for (name, text) in own_profiles() {
        check_node(name, text);
    }
}

#[test]
fn mig_instances_and_profiles_follow_nvidias_walk_on_every_profile() {
    for (name, text) in support::builtin_profiles()
        .iter()
        .map(|(n, t)| (n.as_str(), t.as_str()))
        .chain(own_profiles())
    {
        instances::check_instances(name, &install(text));
    }
}

#[test]
fn versioned_profile_info_checks_the_version() {
    let text = gpuhook_sim::builtin::text("h100-mig-empty").expect("built-in");
    instances::check_versioned_profile_info(&install(text));
}

#[test]
fn error_codes_match_nvml() {
    let node = install(own_profiles()[0].1);
    let nvml = node.nvml();
    let raw = Raw::open(&node.lib);
    assert!(matches!(
        nvml.device_by_uuid("GPU-00000000-0000-0000-0000-000000000000"),
        Err(NvmlError::NotFound)
    ));
    assert!(matches!(
        nvml.device_by_uuid("gpu-a100a100-0000-4000-8000-000000000000"),
        Err(NvmlError::NotFound)
    ));
    assert!(matches!(
        nvml.device_by_pci_bus_id("0000:FE:1F.0"),
        Err(NvmlError::NotFound)
    ));
    assert!(matches!(
        nvml.device_by_pci_bus_id("not-a-bus-id"),
        Err(NvmlError::InvalidArg)
    ));
    let gpu = raw.handle_by_index(0);
    assert_eq!(
        raw.name_into(gpu, 5),
        7,
        "short buffer -> NVML_ERROR_INSUFFICIENT_SIZE"
    );
    assert_eq!(raw.name_into(gpu, 96), SUCCESS);
    assert_eq!(
        raw.u32_out("nvmlDeviceGetMinorNumber", 0xdead0 as *mut _).0,
        INVALID_ARGUMENT,
        "forged handle"
    );
    assert_eq!(
        raw.u32_out("nvmlDeviceGetMinorNumber", std::ptr::null_mut())
            .0,
        INVALID_ARGUMENT
    );
    assert_eq!(raw.null_out("nvmlDeviceGetCount_v2"), INVALID_ARGUMENT);
    assert_eq!(
        raw.memory_v2_with_version(gpu, 1),
        25,
        "wrong struct version -> ARGUMENT_VERSION_MISMATCH"
    );
    assert_eq!(raw.error_string(0), "Success");
    assert_eq!(raw.error_string(999), "Unknown Error");
    assert_eq!(raw.error_string(123_456), "Unknown Error");
    // GPU 1 of the own A100 profile is MIG-capable with MIG off: max 0, no MIG handles.
    let gpu1 = raw.handle_by_index(1);
    assert_eq!(
        raw.u32_out("nvmlDeviceGetMaxMigDeviceCount", gpu1),
        (SUCCESS, 0)
    );
    assert_eq!(raw.mig_by_index(gpu1, 0).0, NOT_SUPPORTED);
    assert_eq!(
        raw.parent_of(gpu1).0,
        INVALID_ARGUMENT,
        "a GPU handle is not a MIG handle"
    );
}

#[test]
fn init_is_reference_counted_and_handles_stay_valid() {
    let node = install(own_profiles()[0].1);
    let raw = Raw::open(&node.lib);
    assert_eq!(
        raw.null_out("nvmlDeviceGetCount_v2"),
        UNINITIALIZED,
        "init is checked first"
    );
    assert_eq!(raw.u32_count(), (UNINITIALIZED, 0), "count before init");
    assert_eq!(
        raw.call0("nvmlShutdown"),
        UNINITIALIZED,
        "shutdown before init"
    );
    assert_eq!(raw.call0("nvmlInit_v2"), SUCCESS);
    assert_eq!(raw.init_with_flags(1), SUCCESS);
    let gpu = raw.handle_by_index(0);
    assert_eq!(raw.call0("nvmlShutdown"), SUCCESS);
    assert_eq!(raw.u32_count(), (SUCCESS, 2), "still initialised once");
    assert_eq!(raw.call0("nvmlShutdown"), SUCCESS);
    assert_eq!(raw.u32_count(), (UNINITIALIZED, 0));
    assert_eq!(
        raw.u32_out("nvmlDeviceGetMinorNumber", gpu).0,
        UNINITIALIZED
    );
    assert_eq!(raw.call0("nvmlShutdown"), UNINITIALIZED);
    assert_eq!(raw.call0("nvmlInit"), SUCCESS);
    assert_eq!(
        raw.u32_out("nvmlDeviceGetMinorNumber", gpu),
        (SUCCESS, 0),
        "handle survives re-init"
    );
    assert_eq!(raw.call0("nvmlShutdown"), SUCCESS);
}

#[test]
fn missing_profile_fails_init_like_a_missing_driver() {
    let node = install(own_profiles()[0].1);
    std::fs::remove_file(
        node.dir
            .path()
            .join(gpuhook_sim::profile::PROFILE_FILE_NAME),
    )
    .expect("rm profile");
    let err = Nvml::builder()
        .lib_path(node.lib.as_os_str())
        .init()
        .expect_err("no profile");
    assert!(matches!(err, NvmlError::DriverNotLoaded), "{err:?}");
}

#[test]
fn compute_mode_is_persisted_for_other_processes() {
    let node = install(own_profiles()[0].1);
    let nvml = node.nvml();
    let mut gpu0 = nvml.device_by_index(0).expect("gpu0");
    assert_eq!(gpu0.compute_mode().expect("mode"), ComputeMode::Default);
    gpu0.set_compute_mode(ComputeMode::ExclusiveProcess)
        .expect("set mode");
    assert_eq!(
        gpu0.compute_mode().expect("mode"),
        ComputeMode::ExclusiveProcess
    );
    let uuid = &node.profile.gpus[0].uuid;
    let state = node
        .dir
        .path()
        .join(format!("gpuhook-sim-state/compute-mode-{uuid}"));
    assert_eq!(
        std::fs::read_to_string(&state).expect("state file").trim(),
        "3"
    );

    let raw = Raw::open(&node.lib);
    let (rc, mig) = raw.mig_by_index(raw.handle_by_index(0), 0);
    assert_eq!(rc, SUCCESS);
    assert_eq!(
        raw.set_compute_mode(mig, 0),
        NOT_SUPPORTED,
        "MIG handles have no compute mode of their own"
    );
    assert_eq!(
        raw.set_compute_mode(raw.handle_by_index(0), 4),
        INVALID_ARGUMENT
    );

    // A second, independent load of the library (another copy in the same dir, as another
    // process would have) sees the mode; GPU 1 was never touched.
    let second = node.dir.path().join("libnvidia-ml-second-load.so");
    std::fs::copy(&node.lib, &second).expect("copy lib");
    let raw2 = Raw::open(&second);
    assert_eq!(
        raw2.u32_count(),
        (UNINITIALIZED, 0),
        "a separate instance, not initialised yet"
    );
    let nvml2 = Nvml::builder()
        .lib_path(second.as_os_str())
        .init()
        .expect("second load");
    let modes: Vec<ComputeMode> = (0..2)
        .map(|i| {
            nvml2
                .device_by_index(i)
                .and_then(|d| d.compute_mode())
                .expect("mode")
        })
        .collect();
    assert_eq!(modes, [ComputeMode::ExclusiveProcess, ComputeMode::Default]);
}
