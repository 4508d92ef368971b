//! The driver's library table: every library a current (R570/R580) driver install ships, with
//! its SONAME form, capability, stub symbols and whether an i386 build exists.
//!
//! The 32-bit set is the one NVIDIA's `.run` installer puts in its compat32 directory and
//! Debian/Ubuntu ship as `:i386` packages (GL/EGL/GLES, glcore/eglcore/glsi/tls, CUDA, NVML,
//! OpenCL, PTX JIT, NVDEC/NVENC, VDPAU, NvFBC, allocator, gpucomp, glvkspirv).
//! Libraries that are versioned on their own (EGL platform libraries) are in [`EXTERNAL`].
//! Data only (and [`installs`]): the materialiser writes these libraries and the profile rules
//! check against them, neither through the other.

use crate::profile::NodeProfile;

/// How a library's SONAME is formed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Soname {
    /// `<stem>.<major>`, e.g. `libcuda.so.1`.
    Major(&'static str),
    /// The full file name `<stem>.<driver_version>` (graphics internals, gpucomp, pkcs11).
    Version,
}

/// One driver library of the install table.
#[derive(Debug, Clone, Copy)]
pub struct LibrarySpec {
    /// `libcuda.so`
    pub stem: &'static str,
    pub soname: Soname,
    /// Driver capability (`utility`, `compute`, `video`, `graphics`, `ngx`).
    pub capability: &'static str,
    /// Exported function names of the stub.
    pub symbols: &'static [&'static str],
    /// Whether the driver also ships an i386 build (installed in `features.lib32_dir`).
    pub lib32: bool,
}

const fn lib(
    stem: &'static str,
    soname: Soname,
    capability: &'static str,
    symbols: &'static [&'static str],
) -> LibrarySpec {
    LibrarySpec {
        stem,
        soname,
        capability,
        symbols,
        lib32: false,
    }
}

/// Marks a library that also has an i386 build.
const fn b32(mut l: LibrarySpec) -> LibrarySpec {
    l.lib32 = true;
    l
}

use Soname::{Major, Version};

/// Libraries of a driver install, by capability (libnvidia-container's table, current drivers).
pub const LIBRARIES: &[LibrarySpec] = &[
    b32(lib(
        "libnvidia-ml.so",
        Major("1"),
        "utility",
        &["nvmlInit_v2"],
    )),
    lib(
        "libnvidia-cfg.so",
        Major("1"),
        "utility",
        &["nvCfgGetPciBusDevicesCount"],
    ),
    lib(
        "libnvidia-nscq.so",
        Major("2"),
        "utility",
        &["nscq_session_create"],
    ),
    b32(lib(
        "libcuda.so",
        Major("1"),
        "compute",
        &["cuInit", "cuDriverGetVersion", "cuDeviceGetCount"],
    )),
    lib(
        "libcudadebugger.so",
        Major("1"),
        "compute",
        &["cudbgGetAPI"],
    ),
    b32(lib(
        "libnvidia-opencl.so",
        Major("1"),
        "compute",
        &["clGetPlatformIDs", "clIcdGetPlatformIDsKHR"],
    )),
    b32(lib(
        "libnvidia-gpucomp.so",
        Version,
        "compute",
        &["nvgpucompGetVersion"],
    )),
    b32(lib(
        "libnvidia-ptxjitcompiler.so",
        Major("1"),
        "compute",
        &["__cuda_CallJitEntryPoint"],
    )),
    b32(lib(
        "libnvidia-allocator.so",
        Major("1"),
        "compute",
        &["nvidia_allocator_init"],
    )),
    lib(
        "libnvidia-pkcs11.so",
        Version,
        "compute",
        &["C_GetFunctionList"],
    ),
    lib(
        "libnvidia-pkcs11-openssl3.so",
        Version,
        "compute",
        &["C_GetFunctionList"],
    ),
    lib("libnvidia-nvvm.so", Major("4"), "compute", &["nvvmVersion"]),
    b32(lib(
        "libvdpau_nvidia.so",
        Major("1"),
        "video",
        &["vdp_imp_device_create_x11"],
    )),
    b32(lib(
        "libnvidia-encode.so",
        Major("1"),
        "video",
        &["NvEncodeAPICreateInstance"],
    )),
    lib(
        "libnvidia-opticalflow.so",
        Major("1"),
        "video",
        &["NvOFAPICreateInstanceCuda"],
    ),
    b32(lib(
        "libnvcuvid.so",
        Major("1"),
        "video",
        &["cuvidCreateDecoder"],
    )),
    b32(lib(
        "libnvidia-eglcore.so",
        Version,
        "graphics",
        &["nvidia_eglcore_stub"],
    )),
    b32(lib(
        "libnvidia-glcore.so",
        Version,
        "graphics",
        &["nvidia_glcore_stub"],
    )),
    b32(lib(
        "libnvidia-tls.so",
        Version,
        "graphics",
        &["nvidia_tls_stub"],
    )),
    b32(lib(
        "libnvidia-glsi.so",
        Version,
        "graphics",
        &["nvidia_glsi_stub"],
    )),
    b32(lib(
        "libnvidia-fbc.so",
        Major("1"),
        "graphics",
        &["NvFBCCreateInstance"],
    )),
    lib(
        "libnvidia-rtcore.so",
        Version,
        "graphics",
        &["rtcoreGetVersion"],
    ),
    lib(
        "libnvoptix.so",
        Major("1"),
        "graphics",
        &["optixQueryFunctionTable"],
    ),
    b32(lib(
        "libGLX_nvidia.so",
        Major("0"),
        "graphics",
        &["__glx_Main", "vk_icdGetInstanceProcAddr"],
    )),
    b32(lib(
        "libEGL_nvidia.so",
        Major("0"),
        "graphics",
        &["__egl_Main"],
    )),
    b32(lib(
        "libGLESv2_nvidia.so",
        Major("2"),
        "graphics",
        &["glGetString"],
    )),
    b32(lib(
        "libGLESv1_CM_nvidia.so",
        Major("1"),
        "graphics",
        &["glGetString"],
    )),
    b32(lib(
        "libnvidia-glvkspirv.so",
        Version,
        "graphics",
        &["nvidia_glvkspirv_stub"],
    )),
    lib(
        "libnvidia-cbl.so",
        Version,
        "graphics",
        &["nvidia_cbl_stub"],
    ),
    lib(
        "libnvidia-ngx.so",
        Major("1"),
        "ngx",
        &["NVSDK_NGX_CUDA_Init"],
    ),
];

/// A library with its own version (not the driver's): NVIDIA's EGL external platform libraries,
/// shipped with the driver since R545 (`libnvidia-egl-gbm.so.1.1.x`, `libnvidia-egl-wayland.so.1.1.x`).
#[derive(Debug, Clone, Copy)]
pub struct ExternalLibrary {
    /// `libnvidia-egl-gbm.so.1.1.2`
    pub file_name: &'static str,
    pub soname: &'static str,
    /// The profile feature that installs it: `gbm` or `xorg`.
    pub feature: &'static str,
    pub symbols: &'static [&'static str],
}

/// The EGL platform libraries of a 570-series driver.
pub const EXTERNAL: &[ExternalLibrary] = &[
    ExternalLibrary {
        file_name: "libnvidia-egl-gbm.so.1.1.2",
        soname: "libnvidia-egl-gbm.so.1",
        feature: "gbm",
        symbols: &["loadEGLExternalPlatform"],
    },
    ExternalLibrary {
        file_name: "libnvidia-egl-wayland.so.1.1.19",
        soname: "libnvidia-egl-wayland.so.1",
        feature: "xorg",
        symbols: &["loadEGLExternalPlatform"],
    },
];

/// True when the profile installs the library `l` at all: graphics and NGX only with
/// `features.graphics`, NSCQ only on NVSwitch systems (`features.fabricmanager_socket`).
pub fn installs(p: &NodeProfile, l: &LibrarySpec) -> bool {
    match l.capability {
        "graphics" | "ngx" => p.features.graphics,
        _ if l.stem == "libnvidia-nscq.so" => p.features.fabricmanager_socket,
        _ => true,
    }
}
