//! MIG products: each model's GPU instance profiles with NVML's profile indexes and ids, memory
//! and possible placements, as NVIDIA's MIG user guide ("Supported MIG Profiles", and
//! `nvidia-smi mig -lgip` / `-lgipp` in "Getting Started with MIG") lists them.
//!
//! Placements are in memory slices: 8 on the 7-compute-slice parts (A100, H100, H20), 4 on the
//! A30. The guide's A100 table: `1g` {0,1,2,3,4,5,6}:1, `1g.20gb` (1_SLICE_REV2) {0,2,4,6}:2,
//! `2g` {0,2,4}:2, `3g` {0,4}:4, `4g` {0}:4, `7g` {0}:8; the A30: `1g` {0,1,2,3}:1, `2g` {0,2}:2,
//! `4g` {0}:4. A `+me` profile (media extensions, one per GPU) places like its base profile.
//! Memory (MiB) is what `-lgip` reports on each part. The GPU instance id NVML gives an
//! instance follows from its memory placement (the driver's memory-partition tree: 0 the whole
//! GPU, 1-2 halves, 3-6 quarters, 7-14 eighths), so the guide's `-cgi 9` on an empty A100
//! yields GPU instance 2 at slice 4.

/// One GPU instance profile of a product.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GiProfileSpec {
    /// `NVML_GPU_INSTANCE_PROFILE_*`.
    pub index: u32,
    /// Profile id (`-lgip` ID).
    pub id: u32,
    pub name: &'static str,
    /// Compute slices.
    pub slices: u32,
    pub instance_count: u32,
    pub memory_mib: u64,
    /// Possible placement starts (memory slices) and the size of each.
    pub starts: &'static [u32],
    pub size: u32,
    /// Has the media extensions (decoders, JPEG, OFA).
    pub media: bool,
}

/// A MIG-capable product.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MigProduct {
    /// NVML names of the parts it covers.
    pub names: &'static [&'static str],
    pub compute_slices: u32,
    pub memory_slices: u32,
    pub profiles: &'static [GiProfileSpec],
}

const SEVEN: &[u32] = &[0, 1, 2, 3, 4, 5, 6];
const EVEN4: &[u32] = &[0, 2, 4, 6];
const EVEN3: &[u32] = &[0, 2, 4];
const HALVES: &[u32] = &[0, 4];
const ZERO: &[u32] = &[0];

#[allow(clippy::too_many_arguments)]
const fn p(
    index: u32,
    id: u32,
    name: &'static str,
    slices: u32,
    count: u32,
    memory_mib: u64,
    starts: &'static [u32],
    size: u32,
    media: bool,
) -> GiProfileSpec {
    GiProfileSpec {
        index,
        id,
        name,
        slices,
        instance_count: count,
        memory_mib,
        starts,
        size,
        media,
    }
}

/// The seven-slice profile set with its memory sizes and names.
macro_rules! seven_slice {
    ($g1:literal, $g1me:literal, $g1r2:expr, $g2:literal, $g3:literal, $g4:literal, $g7:literal, $m1:expr, $m2:expr, $m3:expr, $m7:expr) => {
        &[
            p(0, 19, $g1, 1, 7, $m1, SEVEN, 1, false),
            p(7, 20, $g1me, 1, 1, $m1, SEVEN, 1, true),
            p(9, 15, $g1r2, 1, 4, $m2, EVEN4, 2, false),
            p(1, 14, $g2, 2, 3, $m2, EVEN3, 2, false),
            p(2, 9, $g3, 3, 2, $m3, HALVES, 4, false),
            p(3, 5, $g4, 4, 1, $m3, ZERO, 4, false),
            p(4, 0, $g7, 7, 1, $m7, ZERO, 8, true),
        ]
    };
}

pub const A100_40GB: MigProduct = MigProduct {
    names: &["NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB"],
    compute_slices: 7,
    memory_slices: 8,
    profiles: seven_slice!(
        "1g.5gb",
        "1g.5gb+me",
        "1g.10gb",
        "2g.10gb",
        "3g.20gb",
        "4g.20gb",
        "7g.40gb",
        4864,
        9856,
        19968,
        40192
    ),
};

pub const A100_80GB: MigProduct = MigProduct {
    names: &["NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe"],
    compute_slices: 7,
    memory_slices: 8,
    profiles: seven_slice!(
        "1g.10gb",
        "1g.10gb+me",
        "1g.20gb",
        "2g.20gb",
        "3g.40gb",
        "4g.40gb",
        "7g.80gb",
        9728,
        19968,
        40192,
        80640
    ),
};

pub const H100_80GB: MigProduct = MigProduct {
    names: &["NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe"],
    compute_slices: 7,
    memory_slices: 8,
    profiles: seven_slice!(
        "1g.10gb",
        "1g.10gb+me",
        "1g.20gb",
        "2g.20gb",
        "3g.40gb",
        "4g.40gb",
        "7g.80gb",
        9984,
        20096,
        40448,
        81152
    ),
};

/// H20: the names the simulator's H20 profile uses (`nvidia-smi` on a 96 GB part).
pub const H20: MigProduct = MigProduct {
    names: &["NVIDIA H20"],
    compute_slices: 7,
    memory_slices: 8,
    profiles: &[
        p(0, 19, "1g.12gb", 1, 7, 11008, SEVEN, 1, false),
        p(7, 20, "1g.12gb+me", 1, 1, 11008, SEVEN, 1, true),
        p(1, 14, "2g.24gb", 2, 3, 23552, EVEN3, 2, false),
        p(2, 9, "3g.47gb", 3, 2, 47872, HALVES, 4, false),
        p(3, 5, "4g.47gb", 4, 1, 47872, ZERO, 4, false),
        p(4, 0, "7g.94gb", 7, 1, 96256, ZERO, 8, true),
    ],
};

pub const A30: MigProduct = MigProduct {
    names: &["NVIDIA A30"],
    compute_slices: 4,
    memory_slices: 4,
    profiles: &[
        p(0, 14, "1g.6gb", 1, 4, 5952, &[0, 1, 2, 3], 1, false),
        p(7, 21, "1g.6gb+me", 1, 1, 5952, &[0, 1, 2, 3], 1, true),
        p(1, 5, "2g.12gb", 2, 2, 12160, &[0, 2], 2, false),
        p(8, 6, "2g.12gb+me", 2, 1, 12160, &[0, 2], 2, true),
        p(3, 0, "4g.24gb", 4, 1, 24320, ZERO, 4, true),
    ],
};

pub const PRODUCTS: [&MigProduct; 5] = [&A100_40GB, &A100_80GB, &H100_80GB, &H20, &A30];

/// The product of an NVML GPU name.
pub fn product_for(gpu_name: &str) -> Option<&'static MigProduct> {
    PRODUCTS.into_iter().find(|p| p.names.contains(&gpu_name))
}

/// The GPU instance id the driver gives an instance at memory placement `start` of `size`
/// slices on a GPU of `memory_slices` slices (the memory-partition tree, see the module docs).
pub fn gi_id_for(memory_slices: u32, start: u32, size: u32) -> Option<u32> {
    if size == 0 || memory_slices % size != 0 || start % size != 0 {
        return None;
    }
    let parts = memory_slices / size;
    Some(parts - 1 + start / size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gi_ids_follow_the_partition_tree() {
        assert_eq!(gi_id_for(8, 0, 8), Some(0));
        assert_eq!(
            gi_id_for(8, 4, 4),
            Some(2),
            "-cgi 9 on an empty A100: GPU instance 2"
        );
        assert_eq!(gi_id_for(8, 0, 4), Some(1));
        assert_eq!(gi_id_for(8, 2, 2), Some(4));
        assert_eq!(gi_id_for(8, 6, 1), Some(13));
        assert_eq!(gi_id_for(8, 3, 2), None);
        assert_eq!(gi_id_for(4, 2, 2), Some(2));
    }

    #[test]
    fn every_product_has_unique_ids_and_placements_inside_the_gpu() {
        for prod in PRODUCTS {
            let mut ids: Vec<u32> = prod.profiles.iter().map(|p| p.id).collect();
            ids.sort_unstable();
            ids.dedup();
            assert_eq!(ids.len(), prod.profiles.len(), "{:?}", prod.names);
            for p in prod.profiles {
                assert!(
                    p.starts.iter().all(|s| s + p.size <= prod.memory_slices),
                    "{}",
                    p.name
                );
                assert!(
                    p.starts
                        .iter()
                        .all(|&s| gi_id_for(prod.memory_slices, s, p.size).is_some()),
                    "{}",
                    p.name
                );
            }
        }
    }
}
