//! Profile names of a GPU with MIG mode off, derived as go-nvlib derives them: they must equal
//! the names NVML gives in MIG mode (NVIDIA's MIG user guide, "Supported MIG Profiles"), or the
//! DRA driver's devices would change name with the mode.

use super::derived_name;

const GIB: u64 = 1 << 30;

#[test]
fn derived_names_equal_nvml_names_on_h100_and_a100() {
    // H100 80GB HBM3: 81559 MiB; (index, slices, profile memory MiB, NVML's name).
    let h100 = 81559 * (1 << 20);
    for (i, s, m, n) in [
        (0, 1, 9984, "1g.10gb"),
        (7, 1, 9984, "1g.10gb+me"),
        (9, 1, 20096, "1g.20gb"),
        (1, 2, 20096, "2g.20gb"),
        (2, 3, 40448, "3g.40gb"),
        (3, 4, 40448, "4g.40gb"),
        (4, 7, 81152, "7g.80gb"),
    ] {
        assert_eq!(derived_name(i, s, m, h100), n);
    }
    // A100-SXM4-40GB: 40 GiB.
    for (i, s, m, n) in [
        (0, 1, 4864, "1g.5gb"),
        (9, 1, 9856, "1g.10gb"),
        (2, 3, 19968, "3g.20gb"),
        (4, 7, 40192, "7g.40gb"),
    ] {
        assert_eq!(derived_name(i, s, m, 40 * GIB), n);
    }
    assert_eq!(derived_name(0x0D, 1, 9984, h100), "1g.10gb-me");
    assert_eq!(derived_name(0x0F, 1, 9984, h100), "1g.10gb+me.all");
    assert_eq!(derived_name(0x0A, 1, 9984, h100), "1g.10gb+gfx");
}
