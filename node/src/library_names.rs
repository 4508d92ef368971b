//! The driver's library names by capability: which `ld.so.cache` key is which kind of driver
//! library. A table of its own so that both the file discovery (`files`) and the extra links and
//! configs (`extras`) can classify a name without depending on each other.

use crate::inventory::Capability;

/// Library name prefixes (cache keys start with these) by capability.
#[rustfmt::skip]
pub const LIBRARIES: &[(Capability, &[&str])] = &[
    (Capability::Utility, &["libnvidia-ml.so", "libnvidia-cfg.so", "libnvidia-nscq.so"]),
    (Capability::Compute, &[
        "libcuda.so", "libcudadebugger.so", "libnvidia-opencl.so", "libnvidia-gpucomp.so",
        "libnvidia-ptxjitcompiler.so", "libnvidia-fatbinaryloader.so", "libnvidia-allocator.so",
        "libnvidia-compiler.so", "libnvidia-pkcs11.so", "libnvidia-pkcs11-openssl3.so",
        "libnvidia-nvvm.so",
    ]),
    (Capability::Video, &[
        "libvdpau_nvidia.so", "libnvidia-encode.so", "libnvidia-opticalflow.so", "libnvcuvid.so",
    ]),
    (Capability::Graphics, &[
        "libnvidia-eglcore.so", "libnvidia-glcore.so", "libnvidia-tls.so", "libnvidia-glsi.so",
        "libnvidia-fbc.so", "libnvidia-ifr.so", "libnvidia-rtcore.so", "libnvoptix.so",
        "libGLX_nvidia.so", "libEGL_nvidia.so", "libGLESv2_nvidia.so", "libGLESv1_CM_nvidia.so",
        "libnvidia-glvkspirv.so", "libnvidia-cbl.so", "libnvidia-egl-gbm.so",
        "libnvidia-egl-wayland.so", "libnvidia-egl-wayland2.so", "libnvidia-vulkan-producer.so",
    ]),
    (Capability::Ngx, &["libnvidia-ngx.so"]),
];

/// The capability and prefix a cache key belongs to (`libcuda.so.1` -> compute, `libcuda.so`).
pub fn classify(key: &str) -> Option<(Capability, &'static str)> {
    LIBRARIES.iter().find_map(|(cap, prefixes)| {
        prefixes
            .iter()
            .find(|p| {
                key == **p
                    || key
                        .strip_prefix(**p)
                        .is_some_and(|rest| rest.starts_with('.'))
            })
            .map(|p| (*cap, *p))
    })
}
