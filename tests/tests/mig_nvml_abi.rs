//! The mock NVML's MIG write calls through NVML's C ABI (types and signatures from
//! `nvml-wrapper-sys`, generated from NVIDIA's `nvml.h`): set the mode, GPU instances with and
//! without placement, compute instances with placement, possible placements and remaining
//! capacity on a simulated A100-SXM4-80GB. Expectations: the MIG user guide's A100 placement
//! table (`3g` {0,4}:4, `2g` {0,2,4}:2), nvml.h's return codes, and a second process seeing the
//! same layout.

// Integration tests: a failed unwrap or expect is the test failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ptr::null_mut;

use gpuhook_sim::{materialise, MaterialiseOptions, NodeProfile};
use nvml_wrapper_sys::bindings::{
    nvmlComputeInstanceInfo_t, nvmlComputeInstancePlacement_t, nvmlComputeInstance_t, nvmlDevice_t,
    nvmlGpuInstancePlacement_t, nvmlGpuInstance_t, NvmlLib,
};

const SUCCESS: u32 = 0;
const INVALID_ARGUMENT: u32 = 2;
const IN_USE: u32 = 19;
const INSUFFICIENT_RESOURCES: u32 = 23;

fn open(root: &std::path::Path, p: &NodeProfile) -> NvmlLib {
    let lib = root
        .join(p.lib_dir.trim_start_matches('/'))
        .join("libnvidia-ml.so.1");
    // SAFETY: loading the mock runs no initialisers with preconditions.
    let nvml = unsafe { NvmlLib::new(&lib) }.unwrap();
    // SAFETY: no arguments.
    assert_eq!(unsafe { nvml.nvmlInit_v2() }, SUCCESS);
    nvml
}

fn gpu0(nvml: &NvmlLib) -> nvmlDevice_t {
    let mut d = null_mut();
    // SAFETY: d is a valid out-pointer.
    let rc = unsafe { nvml.nvmlDeviceGetHandleByIndex_v2(0, &mut d) };
    assert_eq!(rc, SUCCESS);
    d
}

/// An a100-mig-mixed node whose GPU 0 has MIG off and no instances.
fn fresh_a100(root: &std::path::Path) -> NodeProfile {
    let mut p = NodeProfile::builtin("a100-mig-mixed").unwrap();
    p.gpus[0].mig_mode = false;
    p.gpus[0].mig_devices.clear();
    let opts = MaterialiseOptions {
        mock_nvml: Some(gpuhook_e2e::mock_nvml_lib()),
        bin_dir: Some(gpuhook_e2e::bin_dir()),
        ldconfig: None,
    };
    materialise(&p, root, &opts).unwrap();
    p
}

/// MIG on, the 3g placement table, capacity, a 2g.20gb placed at slice 2 (slice 1 refused).
fn gpu_instances(nvml: &NvmlLib, d: nvmlDevice_t) -> nvmlGpuInstance_t {
    let mut status = 99;
    let mut places = [nvmlGpuInstancePlacement_t { start: 0, size: 0 }; 8];
    let (mut n, mut cap) = (8, 0);
    let mut gi: nvmlGpuInstance_t = null_mut();
    let bad = nvmlGpuInstancePlacement_t { start: 1, size: 2 };
    let good = nvmlGpuInstancePlacement_t { start: 2, size: 2 };
    // SAFETY: every pointer is a valid local out-pointer or input for its call.
    unsafe {
        assert_eq!(nvml.nvmlDeviceSetMigMode(d, 1, &mut status), SUCCESS);
        assert_eq!(status, SUCCESS, "no reset needed on the simulated node");
        let rc =
            nvml.nvmlDeviceGetGpuInstancePossiblePlacements_v2(d, 9, places.as_mut_ptr(), &mut n);
        assert_eq!(rc, SUCCESS);
        let got: Vec<(u32, u32)> = places[..n as usize]
            .iter()
            .map(|p| (p.start, p.size))
            .collect();
        assert_eq!(got, [(0, 4), (4, 4)], "3g.40gb: {{0,4}}:4");
        assert_eq!(
            nvml.nvmlDeviceGetGpuInstanceRemainingCapacity(d, 14, &mut cap),
            SUCCESS
        );
        assert_eq!(cap, 3, "three 2g.20gb fit an empty A100");
        let rc = nvml.nvmlDeviceCreateGpuInstanceWithPlacement(d, 14, &bad, &mut gi);
        assert_eq!(rc, INVALID_ARGUMENT);
        let rc = nvml.nvmlDeviceCreateGpuInstanceWithPlacement(d, 14, &good, &mut gi);
        assert_eq!(rc, SUCCESS);
        let rc = nvml.nvmlDeviceCreateGpuInstanceWithPlacement(d, 14, &good, &mut null_mut());
        assert_eq!(rc, INSUFFICIENT_RESOURCES);
    }
    gi
}

/// Two 1-slice compute instances in the 2g instance, the first placed at slice 1.
fn compute_instances(nvml: &NvmlLib, gi: nvmlGpuInstance_t) -> nvmlComputeInstance_t {
    let mut ci = null_mut();
    let at1 = nvmlComputeInstancePlacement_t { start: 1, size: 1 };
    // SAFETY: every pointer is a valid local out-pointer or input for its call.
    unsafe {
        let rc = nvml.nvmlGpuInstanceCreateComputeInstanceWithPlacement(gi, 0, &at1, &mut ci);
        assert_eq!(rc, SUCCESS);
        let mut info: nvmlComputeInstanceInfo_t = std::mem::zeroed();
        assert_eq!(nvml.nvmlComputeInstanceGetInfo_v2(ci, &mut info), SUCCESS);
        assert_eq!((info.placement.start, info.placement.size), (1, 1));
        let rc =
            nvml.nvmlGpuInstanceCreateComputeInstanceWithPlacement(gi, 0, &at1, &mut null_mut());
        assert_eq!(rc, INSUFFICIENT_RESOURCES);
        let rc = nvml.nvmlGpuInstanceCreateComputeInstance(gi, 0, &mut null_mut());
        assert_eq!(rc, SUCCESS);
    }
    ci
}

#[test]
fn mig_write_calls_follow_nvml_and_the_placement_table() {
    if !gpuhook_e2e::e2e_ready("mig_nvml_abi", &[]) {
        return;
    }
    let t = tempfile::Builder::new()
        .prefix("gpuhook-mig-abi")
        .tempdir()
        .unwrap();
    let root = t.path().join("driver");
    let p = fresh_a100(&root);
    let nvml = open(&root, &p);
    let d = gpu0(&nvml);
    let gi = gpu_instances(&nvml, d);
    let ci = compute_instances(&nvml, gi);
    let mut status = 99;
    // SAFETY: every pointer is a valid local out-pointer or input for its call.
    unsafe {
        // Without placement a 3g goes where NVML puts it on an empty half: slice 4, GI 2.
        let mut gi3: nvmlGpuInstance_t = null_mut();
        assert_eq!(nvml.nvmlDeviceCreateGpuInstance(d, 9, &mut gi3), SUCCESS);
        let mut gi_info = std::mem::zeroed();
        assert_eq!(nvml.nvmlGpuInstanceGetInfo(gi3, &mut gi_info), SUCCESS);
        // Its placement spans 4 memory slices (MIG user guide: 3g placements are 0-3, 4-7).
        assert_eq!(
            (gi_info.id, gi_info.placement.start, gi_info.placement.size),
            (2, 4, 4)
        );
        // A GPU instance with compute instances cannot go; mode changes neither.
        assert_eq!(nvml.nvmlGpuInstanceDestroy(gi), IN_USE);
        assert_eq!(nvml.nvmlDeviceSetMigMode(d, 0, &mut status), IN_USE);
        assert_eq!(nvml.nvmlComputeInstanceDestroy(ci), SUCCESS);
    }
    // Another process sees the layout: GPU instance 4 (2g.20gb) with one 1-slice compute
    // instance left; GPU instance 2 has none, so it is no MIG device.
    let out = std::process::Command::new(gpuhook_e2e::built("gpuhook-mig-parted"))
        .args(["--driver-root", root.to_str().unwrap(), "export"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && text.contains("\"1c.2g.20gb\": 1"),
        "{text}{err}"
    );
}
