//! The mock's GPU/compute instance and MIG profile calls, driven through NVML's C ABI with the
//! types `nvml-wrapper-sys` generated from NVIDIA's `nvml.h`, in the order NVIDIA's go-nvlib
//! v0.12 walks them in `migdevice.GetProfile` (pkg/nvlib/device/mig_device.go), which
//! `nvidia-ctk cdi generate` runs for every MIG device.
//!
//! Expectations come from NVIDIA: the GPU instance profile ids of its MIG user guide
//! (1g.10gb = 19, 1g.20gb = 15, 2g = 14, 3g = 9, 4g = 5, 7g = 0), the instance counts per
//! profile (7, 4, 3, 2, 1, 1), nvml.h's return codes, and go-nvlib's own derivation of the
//! profile name (`getMigMemorySizeGB`), which must give back the profile's name.

use std::os::raw::c_uint;
use std::ptr::null_mut;

use nvml_wrapper_sys::bindings::{
    nvmlComputeInstanceInfo_t, nvmlComputeInstanceProfileInfo_t, nvmlComputeInstance_t,
    nvmlDeviceAttributes_t, nvmlDevice_t, nvmlGpuInstanceInfo_t, nvmlGpuInstanceProfileInfo_t,
    nvmlGpuInstanceProfileInfo_v2_t, nvmlGpuInstance_t, nvmlMemory_t, NvmlLib,
};

use super::support::{INVALID_ARGUMENT, NOT_FOUND, NOT_SUPPORTED, SUCCESS};

/// `NVML_GPU_INSTANCE_PROFILE_COUNT` of NVML API 13 (nvml.h of go-nvml v0.13.3-1).
const GI_PROFILE_COUNT: c_uint = 0x12;
const CI_PROFILE_COUNT: c_uint = 0x9;
const ARGUMENT_VERSION_MISMATCH: u32 = 25;

/// NVIDIA's GPU instance profile id and instances per GPU for a MIG profile name.
fn nvidia_profile_id(profile: &str) -> (c_uint, c_uint) {
    match profile.split_once('.').map(|(g, _)| g) {
        Some("1g") if profile == "1g.20gb" => (15, 4),
        Some("1g") => (19, 7),
        Some("2g") => (14, 3),
        Some("3g") => (9, 2),
        Some("4g") => (5, 1),
        Some("7g") => (0, 1),
        _ => panic!("no NVIDIA profile id known for {profile}"),
    }
}

/// go-nvlib's `getMigMemorySizeGB`: the `XXgb` of a MIG profile name.
// Go's float arithmetic and `uint64(math.Round(..))`, reproduced as is: the value is a small
// positive number of GB, so the final conversion neither truncates nor loses a sign.
#[allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    clippy::cast_precision_loss
)]
fn go_nvlib_memory_gb(total_bytes: u64, mig_mb: u64) -> u64 {
    const GB: u64 = 1024 * 1024 * 1024;
    let frac = (mig_mb as f64 * 1024.0 * 1024.0) / total_bytes as f64;
    let frac = (frac * 8.0).ceil() / 8.0;
    let total_gb = total_bytes.div_ceil(GB) as f64;
    (frac * total_gb).round() as u64
}

pub struct Lib(NvmlLib);

impl Lib {
    pub fn open(path: &std::path::Path) -> Lib {
        // SAFETY: loading the mock runs no initialisers with preconditions.
        let lib = unsafe { NvmlLib::new(path) }.expect("load the mock through nvml-wrapper-sys");
        // SAFETY: no arguments.
        assert_eq!(unsafe { lib.nvmlInit_v2() }, SUCCESS);
        Lib(lib)
    }

    fn device(&self, index: c_uint) -> nvmlDevice_t {
        let mut d = null_mut();
        // SAFETY: valid out-pointer.
        let rc = unsafe { self.0.nvmlDeviceGetHandleByIndex_v2(index, &mut d) };
        assert_eq!(rc, SUCCESS);
        d
    }

    fn gi_profile(&self, d: nvmlDevice_t, i: c_uint) -> (u32, nvmlGpuInstanceProfileInfo_t) {
        // SAFETY: plain-data struct; zero is a valid value.
        let mut info: nvmlGpuInstanceProfileInfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: valid out-pointer; the handle came from this library.
        (
            unsafe { self.0.nvmlDeviceGetGpuInstanceProfileInfo(d, i, &mut info) },
            info,
        )
    }
}

/// go-nvlib's walk from a MIG device to its profile; returns the profile name it derives.
fn walk_to_profile(lib: &Lib, mig: nvmlDevice_t, gi_id: c_uint, ci_id: c_uint) -> String {
    let l = &lib.0;
    // SAFETY: every call below gets valid out-pointers of the header's types and handles that
    // came from `l`; arrays are sized by the profile's `instanceCount`.
    unsafe {
        let mut parent = null_mut();
        assert_eq!(
            l.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig, &mut parent),
            SUCCESS
        );
        let mut mem: nvmlMemory_t = std::mem::zeroed();
        assert_eq!(l.nvmlDeviceGetMemoryInfo(parent, &mut mem), SUCCESS);
        let mut attrs: nvmlDeviceAttributes_t = std::mem::zeroed();
        assert_eq!(l.nvmlDeviceGetAttributes_v2(mig, &mut attrs), SUCCESS);
        let mut gi: nvmlGpuInstance_t = null_mut();
        assert_eq!(
            l.nvmlDeviceGetGpuInstanceById(parent, gi_id, &mut gi),
            SUCCESS
        );
        let mut ci: nvmlComputeInstance_t = null_mut();
        assert_eq!(
            l.nvmlGpuInstanceGetComputeInstanceById(gi, ci_id, &mut ci),
            SUCCESS
        );
        let mut gi_info: nvmlGpuInstanceInfo_t = std::mem::zeroed();
        assert_eq!(l.nvmlGpuInstanceGetInfo(gi, &mut gi_info), SUCCESS);
        assert_eq!((gi_info.device, gi_info.id), (parent, gi_id));
        let mut ci_info: nvmlComputeInstanceInfo_t = std::mem::zeroed();
        assert_eq!(l.nvmlComputeInstanceGetInfo_v2(ci, &mut ci_info), SUCCESS);
        assert_eq!((ci_info.gpuInstance, ci_info.id), (gi, ci_id));
        // A placement spans the memory slices of the profile, which can exceed its compute
        // slices (MIG user guide, A100: a 3g takes placements {0,4} of size 4, a 7g one of 8).
        assert!(attrs.gpuInstanceSliceCount <= gi_info.placement.size);
        for i in 0..GI_PROFILE_COUNT {
            let (rc, gp) = lib.gi_profile(parent, i);
            assert!(rc == SUCCESS || rc == NOT_SUPPORTED, "profile {i}: rc {rc}");
            if rc != SUCCESS || gp.id != gi_info.profileId {
                continue;
            }
            assert_eq!(attrs.gpuInstanceSliceCount, gp.sliceCount);
            // The instance is listed among its profile's instances.
            let mut list = vec![null_mut(); gp.instanceCount as usize];
            let mut n = 0;
            assert_eq!(
                l.nvmlDeviceGetGpuInstances(parent, gp.id, list.as_mut_ptr(), &mut n),
                SUCCESS
            );
            assert!(list[..n as usize].contains(&gi));
            for j in 0..CI_PROFILE_COUNT {
                let mut cp: nvmlComputeInstanceProfileInfo_t = std::mem::zeroed();
                let rc = l.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, j, 0, &mut cp);
                assert!(
                    rc == SUCCESS || rc == NOT_SUPPORTED,
                    "CI profile {j}: rc {rc}"
                );
                if rc != SUCCESS || cp.id != ci_info.profileId {
                    continue;
                }
                let mut cis = vec![null_mut(); cp.instanceCount as usize];
                let mut n = 0;
                assert_eq!(
                    l.nvmlGpuInstanceGetComputeInstances(gi, cp.id, cis.as_mut_ptr(), &mut n),
                    SUCCESS
                );
                assert!(cis[..n as usize].contains(&ci));
                let gb = go_nvlib_memory_gb(mem.total, attrs.memorySizeMB);
                let (c, g) = (cp.sliceCount, gp.sliceCount);
                return if c == g {
                    format!("{g}g.{gb}gb")
                } else {
                    format!("{c}c.{g}g.{gb}gb")
                };
            }
        }
    }
    panic!("no matching profile IDs found (go-nvlib's error) for GI {gi_id} CI {ci_id}");
}

/// Every MIG device of every built-in profile resolves to its own profile name by NVIDIA's walk,
/// with NVIDIA's profile ids; GPUs without MIG mode refuse the instance calls.
pub fn check_instances(name: &str, node: &super::support::Node) {
    let lib = Lib::open(&node.lib);
    for g in &node.profile.gpus {
        let dev = lib.device(g.index);
        let what = format!("{name} GPU {}", g.index);
        // SAFETY: plain-data struct; zero is a valid value.
        let mut attrs: nvmlDeviceAttributes_t = unsafe { std::mem::zeroed() };
        // SAFETY: valid out-pointer; handle from this library.
        let rc = unsafe { lib.0.nvmlDeviceGetAttributes_v2(dev, &mut attrs) };
        assert_eq!(rc, NOT_SUPPORTED, "{what}: attributes of a full GPU");
        let past_last = lib.gi_profile(dev, GI_PROFILE_COUNT).0;
        assert_eq!(past_last, INVALID_ARGUMENT, "{what}: past the last profile");
        if !g.mig_mode {
            // nvml.h: the v1 profile info is `NOT_SUPPORTED` only "if device doesn't support
            // MIG" (MIG mode off still answers; NVIDIA's DRA driver lists DynamicMIG placements
            // of a Hopper GPU with MIG mode off through it).
            let (mut cur, mut pend) = (0, 0);
            // SAFETY: valid out-pointers; handle from this library.
            let capable =
                unsafe { lib.0.nvmlDeviceGetMigMode(dev, &mut cur, &mut pend) } == SUCCESS;
            let (rc, one) = lib.gi_profile(dev, 0);
            if capable {
                assert_eq!((rc, one.sliceCount), (SUCCESS, 1), "{what}: MIG mode off");
            } else {
                assert_eq!(rc, NOT_SUPPORTED, "{what}: no MIG");
            }
            continue;
        }
        let (rc, one) = lib.gi_profile(dev, 0);
        assert_eq!(
            (rc, one.id, one.sliceCount),
            (SUCCESS, 19, 1),
            "{what}: 1-slice profile"
        );
        let mut gi = null_mut();
        // SAFETY: valid out-pointer.
        let rc = unsafe { lib.0.nvmlDeviceGetGpuInstanceById(dev, 14, &mut gi) };
        let used = g.mig_devices.iter().any(|m| m.gi_id == 14);
        assert_eq!(rc, if used { SUCCESS } else { NOT_FOUND }, "{what}: GI 14");
        for (i, m) in g.mig_devices.iter().enumerate() {
            let mut mig = null_mut();
            // SAFETY: valid out-pointer.
            let rc = unsafe {
                lib.0.nvmlDeviceGetMigDeviceHandleByIndex(
                    dev,
                    c_uint::try_from(i).unwrap(),
                    &mut mig,
                )
            };
            assert_eq!(rc, SUCCESS);
            let (id, count) = nvidia_profile_id(&m.profile);
            let (_, gp) = (0..GI_PROFILE_COUNT)
                .map(|p| lib.gi_profile(dev, p))
                .find(|(rc, gp)| *rc == SUCCESS && gp.id == id)
                .unwrap_or_else(|| {
                    panic!("{what}: no profile with NVIDIA's id {id} for {}", m.profile)
                });
            assert_eq!(gp.instanceCount, count, "{what}: {} instances", m.profile);
            let derived = walk_to_profile(&lib, mig, m.gi_id, m.ci_id);
            assert_eq!(
                derived, m.profile,
                "{what} MIG {i}: go-nvlib's profile name"
            );
        }
    }
}

/// A versioned call with a version the header does not define is refused.
pub fn check_versioned_profile_info(node: &super::support::Node) {
    let lib = Lib::open(&node.lib);
    let dev = lib.device(0);
    // SAFETY: plain-data struct; zero is a valid value.
    let mut v2: nvmlGpuInstanceProfileInfo_v2_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to the header's v2 struct.
    let rc = unsafe { lib.0.nvmlDeviceGetGpuInstanceProfileInfoV(dev, 0, &mut v2) };
    assert_eq!(rc, ARGUMENT_VERSION_MISMATCH, "version 0");
    // nvmlGpuInstanceProfileInfo_v2 = sizeof | 2 << 24.
    v2.version = c_uint::try_from(std::mem::size_of::<nvmlGpuInstanceProfileInfo_v2_t>()).unwrap()
        | (2 << 24);
    // SAFETY: as above.
    let rc = unsafe { lib.0.nvmlDeviceGetGpuInstanceProfileInfoV(dev, 0, &mut v2) };
    assert_eq!((rc, v2.id, v2.sliceCount), (SUCCESS, 19, 1));
    let name: Vec<u8> = v2
        .name
        .iter()
        .take_while(|c| **c != 0)
        .map(|c| c.to_ne_bytes()[0])
        .collect();
    assert!(
        String::from_utf8_lossy(&name).starts_with("MIG 1g."),
        "{name:?}"
    );
}
