//! Gives the cdylib the SONAME of the real library (`libnvidia-ml.so.1`), so that `ldconfig` in a
//! simulated driver root makes the same `libnvidia-ml.so.1 -> libnvidia-ml.so.<ver>` link that a
//! real driver install has, and consumers that check SONAMEs see what they expect. Like a real
//! NVML (C, linked against libc only), it loads no `libgcc_s` (see `gpuhook-build`).

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libnvidia-ml.so.1");
    println!("cargo:rerun-if-changed=build.rs");
    gpuhook_build::link_unwinder_statically();
}
