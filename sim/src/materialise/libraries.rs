//! Driver libraries: ELF stubs with the real file names and SONAMEs, the mock NVML, soname and
//! development links, `/etc/ld.so.conf` and an `ld.so.cache` built by the host's real `ldconfig`.
//!
//! Libraries of drivers before R470 that modern drivers no longer ship
//! (`libnvidia-fatbinaryloader`, `libnvidia-compiler`, `libnvidia-ifr`) are left out, like on a
//! real 570/580 install.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::fsutil::{copy_atomic, mkdirs, symlink_atomic, under, write_atomic};
use super::SimError;
use crate::elf;
use crate::profile::{NodeProfile, PROFILE_FILE_NAME};

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
    /// Whether a development link `<stem> -> <soname>` exists.
    pub dev_link: bool,
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
        dev_link: false,
    }
}

const fn dev(mut l: LibrarySpec) -> LibrarySpec {
    l.dev_link = true;
    l
}

use Soname::{Major, Version};

/// Libraries of a driver install, by capability (libnvidia-container's table, current drivers).
pub const LIBRARIES: &[LibrarySpec] = &[
    dev(lib(
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
    dev(lib(
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
    lib(
        "libnvidia-opencl.so",
        Major("1"),
        "compute",
        &["clGetPlatformIDs", "clIcdGetPlatformIDsKHR"],
    ),
    lib(
        "libnvidia-gpucomp.so",
        Version,
        "compute",
        &["nvgpucompGetVersion"],
    ),
    lib(
        "libnvidia-ptxjitcompiler.so",
        Major("1"),
        "compute",
        &["__cuda_CallJitEntryPoint"],
    ),
    lib(
        "libnvidia-allocator.so",
        Major("1"),
        "compute",
        &["nvidia_allocator_init"],
    ),
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
    lib(
        "libvdpau_nvidia.so",
        Major("1"),
        "video",
        &["vdp_imp_device_create_x11"],
    ),
    dev(lib(
        "libnvidia-encode.so",
        Major("1"),
        "video",
        &["NvEncodeAPICreateInstance"],
    )),
    dev(lib(
        "libnvidia-opticalflow.so",
        Major("1"),
        "video",
        &["NvOFAPICreateInstanceCuda"],
    )),
    dev(lib(
        "libnvcuvid.so",
        Major("1"),
        "video",
        &["cuvidCreateDecoder"],
    )),
    lib(
        "libnvidia-eglcore.so",
        Version,
        "graphics",
        &["nvidia_eglcore_stub"],
    ),
    lib(
        "libnvidia-glcore.so",
        Version,
        "graphics",
        &["nvidia_glcore_stub"],
    ),
    lib(
        "libnvidia-tls.so",
        Version,
        "graphics",
        &["nvidia_tls_stub"],
    ),
    lib(
        "libnvidia-glsi.so",
        Version,
        "graphics",
        &["nvidia_glsi_stub"],
    ),
    lib(
        "libnvidia-fbc.so",
        Major("1"),
        "graphics",
        &["NvFBCCreateInstance"],
    ),
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
    lib(
        "libGLX_nvidia.so",
        Major("0"),
        "graphics",
        &["__glx_Main", "vk_icdGetInstanceProcAddr"],
    ),
    lib("libEGL_nvidia.so", Major("0"), "graphics", &["__egl_Main"]),
    lib(
        "libGLESv2_nvidia.so",
        Major("2"),
        "graphics",
        &["glGetString"],
    ),
    lib(
        "libGLESv1_CM_nvidia.so",
        Major("1"),
        "graphics",
        &["glGetString"],
    ),
    lib(
        "libnvidia-glvkspirv.so",
        Version,
        "graphics",
        &["nvidia_glvkspirv_stub"],
    ),
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

/// A library file as installed for one profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstalledLibrary {
    /// `libcuda.so.570.158.01`
    pub file_name: String,
    /// `libcuda.so.1`
    pub soname: String,
    pub capability: &'static str,
    pub dev_link: Option<String>,
    symbols: &'static [&'static str],
}

/// The libraries a profile installs: graphics and NGX only with `features.graphics`, NSCQ only on
/// NVSwitch systems (`features.fabricmanager_socket`).
pub fn libraries(p: &NodeProfile) -> Vec<InstalledLibrary> {
    LIBRARIES
        .iter()
        .filter(|l| match l.capability {
            "graphics" | "ngx" => p.features.graphics,
            _ if l.stem == "libnvidia-nscq.so" => p.features.fabricmanager_socket,
            _ => true,
        })
        .map(|l| {
            let file_name = format!("{}.{}", l.stem, p.driver_version);
            let soname = match l.soname {
                Major(m) => format!("{}.{m}", l.stem),
                Version => file_name.clone(),
            };
            InstalledLibrary {
                dev_link: l.dev_link.then(|| l.stem.to_string()),
                file_name,
                soname,
                capability: l.capability,
                symbols: l.symbols,
            }
        })
        .collect()
}

/// Installs every library of the profile in `<root><lib_dir>`; returns their paths inside the root.
pub fn install(root: &Path, p: &NodeProfile, mock_nvml: &Path) -> Result<Vec<String>, SimError> {
    let dir = under(root, &p.lib_dir);
    mkdirs(&dir)?;
    if !mock_nvml.is_file() {
        return Err(SimError::MockNvmlMissing {
            path: mock_nvml.to_path_buf(),
        });
    }
    let mut installed = Vec::new();
    for l in libraries(p) {
        let path = dir.join(&l.file_name);
        if l.soname == "libnvidia-ml.so.1" {
            copy_atomic(mock_nvml, &path, 0o755)?;
            write_atomic(&dir.join(PROFILE_FILE_NAME), p.to_toml().as_bytes(), 0o644)?;
        } else {
            write_atomic(&path, &elf::shared_object(&l.soname, l.symbols), 0o755)?;
        }
        if l.soname != l.file_name {
            symlink_atomic(&l.file_name, &dir.join(&l.soname))?;
        }
        if let Some(link) = &l.dev_link {
            symlink_atomic(&l.soname, &dir.join(link))?;
        }
        installed.push(format!(
            "{}/{}",
            p.lib_dir.trim_end_matches('/'),
            l.file_name
        ));
    }
    Ok(installed)
}

/// Writes `/etc/ld.so.conf` (including `ld.so.conf.d/*.conf`) and a drop-in listing the lib dir.
pub fn write_ld_so_conf(root: &Path, p: &NodeProfile) -> Result<(), SimError> {
    write_atomic(
        &under(root, "/etc/ld.so.conf"),
        b"include /etc/ld.so.conf.d/*.conf\n",
        0o644,
    )?;
    let conf = format!(
        "# NVIDIA driver libraries (gpuhook-sim profile {})\n{}\n",
        p.name, p.lib_dir
    );
    write_atomic(
        &under(root, "/etc/ld.so.conf.d/00-nvidia-driver.conf"),
        conf.as_bytes(),
        0o644,
    )
}

/// The host's real ldconfig: Debian's `/sbin/ldconfig` is a shell wrapper of `ldconfig.real`.
pub fn find_ldconfig() -> Option<PathBuf> {
    [
        "/sbin/ldconfig.real",
        "/usr/sbin/ldconfig.real",
        "/sbin/ldconfig",
        "/usr/sbin/ldconfig",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.is_file())
}

/// Runs `ldconfig -r <root>` so that `<root>/etc/ld.so.cache` lists the driver libraries.
pub fn run_ldconfig(root: &Path, ldconfig: Option<&Path>) -> Result<PathBuf, SimError> {
    let ldconfig = match ldconfig {
        Some(p) => p.to_path_buf(),
        None => find_ldconfig().ok_or(SimError::LdconfigNotFound)?,
    };
    // ldconfig keeps an aux cache under the root; give it its directory. `-i` ignores what is in
    // it: the cache is keyed by inode and ctime (seconds), and rebuilding a root within the same
    // second recycles inodes, so a stale entry would give a library another library's SONAME.
    mkdirs(&under(root, "/var/cache/ldconfig"))?;
    let out = Command::new(&ldconfig)
        .arg("-i")
        .arg("-r")
        .arg(root)
        .env_clear()
        .output()
        .map_err(|source| SimError::Io {
            op: "run",
            path: ldconfig.clone(),
            source,
        })?;
    if !out.status.success() {
        return Err(SimError::Ldconfig {
            command: format!("{} -i -r {}", ldconfig.display(), root.display()),
            detail: format!(
                "{}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        });
    }
    let cache = under(root, "/etc/ld.so.cache");
    if !cache.is_file() {
        return Err(SimError::Ldconfig {
            command: format!("{} -i -r {}", ldconfig.display(), root.display()),
            detail: format!("it succeeded but wrote no {}", cache.display()),
        });
    }
    Ok(cache)
}

#[cfg(test)]
#[path = "libraries_tests.rs"]
mod tests;
