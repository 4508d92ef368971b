//! GPU instance profile names for a GPU with MIG mode off, where NVML's v1 profile info (the
//! only one answered without MIG mode) carries no name.

use super::mig_ffi::{GiProfileInfoV1, GiProfileInfoV2};

/// A profile's name from its v1 info, as NVIDIA's go-nvlib (`pkg/nvlib/device/mig_profile.go`,
/// `NewMigProfile`, `getMigMemorySizeGB`) names it: `<slices>g.<GB>gb`, the memory rounded up to
/// an eighth of the GPU's, times the GPU's memory in whole GB (rounded up), rounded, with the suffix of the profile index (nvml.h's
/// `NVML_GPU_INSTANCE_PROFILE_*`: `_REV1` `+me`, `_GFX` `+gfx`, `_NO_ME` `-me`, `_ALL_ME`
/// `+me.all`).
pub fn derived_name(index: u32, slices: u32, memory_mib: u64, total_bytes: u64) -> String {
    let frac = (memory_mib as f64) * 1024.0 * 1024.0 / total_bytes.max(1) as f64;
    let total_gb = total_bytes.div_ceil(1 << 30) as f64;
    let gb = ((frac * 8.0).ceil() / 8.0 * total_gb).round();
    let suffix = match index {
        0x7 | 0x8 => "+me",
        0x0A | 0x0B | 0x0C | 0x11 => "+gfx",
        0x0D | 0x0E => "-me",
        0x0F | 0x10 => "+me.all",
        _ => "",
    };
    format!("{slices}g.{gb}gb{suffix}")
}

/// The v2 layout of a v1 profile info, named `name`.
pub(super) fn v2_of(v1: GiProfileInfoV1, name: &str) -> GiProfileInfoV2 {
    // SAFETY: all-zero is a valid GiProfileInfoV2 (integers and a char array).
    let mut v2: GiProfileInfoV2 = unsafe { std::mem::zeroed() };
    v2.id = v1.id;
    v2.slice_count = v1.slice_count;
    v2.instance_count = v1.instance_count;
    v2.multiprocessor_count = v1.multiprocessor_count;
    v2.copy_engine_count = v1.copy_engine_count;
    v2.decoder_count = v1.decoder_count;
    v2.encoder_count = v1.encoder_count;
    v2.jpeg_count = v1.jpeg_count;
    v2.ofa_count = v1.ofa_count;
    v2.memory_size_mb = v1.memory_size_mb;
    for (dst, b) in v2.name.iter_mut().zip(name.bytes().take(95)) {
        *dst = std::os::raw::c_char::from_ne_bytes([b]);
    }
    v2
}

#[cfg(test)]
#[path = "mig_names_tests.rs"]
mod tests;
