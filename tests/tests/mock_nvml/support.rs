//! Support for `mock_nvml.rs`: installing the mock like the materialiser does, the test's own
//! profiles, expected-value mapping, and raw `dlsym` calls for what `nvml-wrapper` does not wrap.

use std::ffi::{c_void, CStr};
use std::os::raw::{c_char, c_uint};
use std::path::{Path, PathBuf};

use gpuhook_sim::profile::{NodeProfile, PROFILE_FILE_NAME};
use nvml_wrapper::enum_wrappers::device::Brand;
use nvml_wrapper::enums::device::DeviceArchitecture;
use nvml_wrapper::Nvml;

pub const SUCCESS: u32 = 0;
pub const UNINITIALIZED: u32 = 1;
pub const INVALID_ARGUMENT: u32 = 2;
pub const NOT_SUPPORTED: u32 = 3;
pub const NOT_FOUND: u32 = 6;

/// The built-in profiles `sim/profiles/*.toml` must provide.
pub const ALL_PROFILES: &[&str] = &[
    "t4",
    "l20",
    "dgx-h100",
    "a100-mig-mixed",
    "h100-mig",
    "h20-mig",
    "l20-minimal",
    "rhel-a100",
    "h100-mig-empty",
    "workstation-full",
];

/// An installed mock: `dir/libnvidia-ml.so.<ver>`, `dir/libnvidia-ml.so.1 -> that`, the profile.
pub struct Node {
    pub dir: tempfile::TempDir,
    /// The `libnvidia-ml.so.1` symlink, what consumers load.
    pub lib: PathBuf,
    pub profile: NodeProfile,
}

impl Node {
    pub fn nvml(&self) -> Nvml {
        Nvml::builder()
            .lib_path(self.lib.as_os_str())
            .init()
            .expect("nvmlInit_v2 on the mock")
    }
}

/// Installs a private copy of the mock (a copy, not a link: each node is its own load).
pub fn install(profile_text: &str) -> Node {
    let profile = NodeProfile::from_toml_str(profile_text).unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().expect("tempdir");
    let real = format!("libnvidia-ml.so.{}", profile.driver_version);
    std::fs::copy(gpuhook_e2e::mock_nvml_lib(), dir.path().join(&real)).expect("copy mock");
    let lib = dir.path().join("libnvidia-ml.so.1");
    std::os::unix::fs::symlink(&real, &lib).expect("soname link");
    std::fs::write(dir.path().join(PROFILE_FILE_NAME), profile_text).expect("write profile");
    Node { dir, lib, profile }
}

/// `(name, text)` of every built-in profile compiled into `gpuhook-sim`.
pub fn builtin_profiles() -> Vec<(String, String)> {
    gpuhook_sim::builtin_names()
        .into_iter()
        .map(|name| {
            let text = gpuhook_sim::builtin::text(name).expect("a listed built-in has text");
            (name.to_string(), text.to_string())
        })
        .collect()
}

/// The test's own profile: upper-case hex in a bus id, a MIG GPU with free MIG slots (indexes
/// with no device behind them), and a MIG-capable GPU with MIG off.
const OWN_A100: &str = include_str!("../../../sim/testdata/own-a100-partial.toml");

pub fn own_profiles() -> Vec<(&'static str, &'static str)> {
    vec![("own-a100-partial", OWN_A100)]
}

/// A bus id normalised to NVML's `%08X:%02X:%02X.%X`, for comparisons.
pub fn bus_id_key(id: &str) -> String {
    let parts: Vec<&str> = id.split(':').collect();
    let [domain, bus, rest] = parts.as_slice() else {
        panic!("bus id {id}")
    };
    let num = |s: &str| u32::from_str_radix(s, 16).unwrap_or_else(|_| panic!("bus id {id}"));
    let (dev, func) = rest.split_once('.').unwrap_or((rest, "0"));
    format!(
        "{:08X}:{:02X}:{:02X}.{:X}",
        num(domain),
        num(bus),
        num(dev),
        num(func)
    )
}

/// The NVML brand of a profile's `brand` (`nvidiartx`, as NVIDIA_REQUIRE_CUDA spells it, is nvml.h's
/// `NVML_BRAND_NVIDIA_RTX`; `-` and `_` are ignored).
pub fn brand_of(name: &str) -> Brand {
    match name.replace(['-', '_'], "").as_str() {
        "tesla" => Brand::Tesla,
        "nvidia" => Brand::Nvidia,
        "geforce" => Brand::GeForce,
        "quadro" => Brand::Quadro,
        "nvidiartx" => Brand::NvidiaRTX,
        "geforcertx" => Brand::GeForceRTX,
        other => panic!("brand {other:?} is not mapped in the test"),
    }
}

pub fn arch_of(name: &str) -> DeviceArchitecture {
    match name {
        "turing" => DeviceArchitecture::Turing,
        "ampere" => DeviceArchitecture::Ampere,
        "ada" => DeviceArchitecture::Ada,
        "hopper" => DeviceArchitecture::Hopper,
        "blackwell" => DeviceArchitecture::Blackwell,
        other => panic!("architecture {other:?} is not mapped in the test"),
    }
}

pub type Handle = *mut c_void;

/// Raw entry points of one loaded copy of the mock (same instance as `nvml-wrapper`'s when the
/// path is the same: `dlopen` returns the already-loaded object).
pub struct Raw {
    lib: libloading::Library,
}

impl Raw {
    pub fn open(path: &Path) -> Raw {
        // SAFETY: the mock has no initialisers with preconditions.
        let lib = unsafe { libloading::Library::new(path) }.expect("dlopen mock");
        Raw { lib }
    }

    fn sym<T: Copy>(&self, name: &str) -> T {
        let cname = format!("{name}\0");
        // SAFETY: every call site names the NVML function whose C type `T` spells out.
        *unsafe { self.lib.get::<T>(cname.as_bytes()) }.unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    pub fn call0(&self, name: &str) -> u32 {
        let f: unsafe extern "C" fn() -> u32 = self.sym(name);
        // SAFETY: takes no arguments.
        unsafe { f() }
    }

    pub fn init_with_flags(&self, flags: c_uint) -> u32 {
        let f: unsafe extern "C" fn(c_uint) -> u32 = self.sym("nvmlInitWithFlags");
        // SAFETY: plain integer argument.
        unsafe { f(flags) }
    }

    /// Calls `name(NULL)` for a function taking one out-pointer.
    pub fn null_out(&self, name: &str) -> u32 {
        let f: unsafe extern "C" fn(*mut c_uint) -> u32 = self.sym(name);
        // SAFETY: null is a legal argument; the library must reject it.
        unsafe { f(std::ptr::null_mut()) }
    }

    pub fn u32_count(&self) -> (u32, c_uint) {
        let f: unsafe extern "C" fn(*mut c_uint) -> u32 = self.sym("nvmlDeviceGetCount_v2");
        let mut n = 0;
        // SAFETY: `n` is a valid out-pointer.
        (unsafe { f(&mut n) }, n)
    }

    /// `name(handle, &out)` for functions with one `unsigned int` out-parameter.
    pub fn u32_out(&self, name: &str, handle: Handle) -> (u32, c_uint) {
        let f: unsafe extern "C" fn(Handle, *mut c_uint) -> u32 = self.sym(name);
        let mut v = 0;
        // SAFETY: `v` is a valid out-pointer; the handle is validated by the library.
        (unsafe { f(handle, &mut v) }, v)
    }

    pub fn handle_by_index(&self, index: c_uint) -> Handle {
        let f: unsafe extern "C" fn(c_uint, *mut Handle) -> u32 =
            self.sym("nvmlDeviceGetHandleByIndex_v2");
        let mut h = std::ptr::null_mut();
        // SAFETY: `h` is a valid out-pointer.
        let rc = unsafe { f(index, &mut h) };
        assert_eq!(rc, SUCCESS, "handle of GPU {index}");
        h
    }

    pub fn mig_by_index(&self, gpu: Handle, index: c_uint) -> (u32, Handle) {
        let f: unsafe extern "C" fn(Handle, c_uint, *mut Handle) -> u32 =
            self.sym("nvmlDeviceGetMigDeviceHandleByIndex");
        let mut h = std::ptr::null_mut();
        // SAFETY: `h` is a valid out-pointer.
        (unsafe { f(gpu, index, &mut h) }, h)
    }

    pub fn parent_of(&self, mig: Handle) -> (u32, Handle) {
        let f: unsafe extern "C" fn(Handle, *mut Handle) -> u32 =
            self.sym("nvmlDeviceGetDeviceHandleFromMigDeviceHandle");
        let mut h = std::ptr::null_mut();
        // SAFETY: `h` is a valid out-pointer.
        (unsafe { f(mig, &mut h) }, h)
    }

    /// `nvmlDeviceGetName` into a buffer of `len` bytes (96 allocated).
    pub fn name_into(&self, handle: Handle, len: c_uint) -> u32 {
        assert!(len <= 96);
        let f: unsafe extern "C" fn(Handle, *mut c_char, c_uint) -> u32 =
            self.sym("nvmlDeviceGetName");
        let mut buf = [0 as c_char; 96];
        // SAFETY: `buf` has room for `len` <= 96 bytes.
        unsafe { f(handle, buf.as_mut_ptr(), len) }
    }

    /// `nvmlDeviceGetMemoryInfo_v2` with a caller-chosen struct version.
    pub fn memory_v2_with_version(&self, handle: Handle, version: u32) -> u32 {
        let f: unsafe extern "C" fn(Handle, *mut u64) -> u32 =
            self.sym("nvmlDeviceGetMemoryInfo_v2");
        let mut mem = [0u64; 5]; // nvmlMemory_v2_t is 40 bytes, version in the first 4
        mem[0] = u64::from(version);
        // SAFETY: `mem` is 40 writable, suitably aligned bytes.
        unsafe { f(handle, mem.as_mut_ptr()) }
    }

    pub fn set_compute_mode(&self, handle: Handle, mode: c_uint) -> u32 {
        let f: unsafe extern "C" fn(Handle, c_uint) -> u32 = self.sym("nvmlDeviceSetComputeMode");
        // SAFETY: plain arguments; the handle is validated by the library.
        unsafe { f(handle, mode) }
    }

    pub fn error_string(&self, code: u32) -> String {
        let f: unsafe extern "C" fn(u32) -> *const c_char = self.sym("nvmlErrorString");
        // SAFETY: nvmlErrorString returns a static NUL-terminated string.
        unsafe { CStr::from_ptr(f(code)) }
            .to_string_lossy()
            .into_owned()
    }
}
