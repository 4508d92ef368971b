//! Tests of the device table's profile parsing.

use super::*;

#[test]
fn versions_and_enums() {
    assert_eq!(parse_cuda_version("12.8"), Ok(12080));
    assert_eq!(parse_cuda_version("13.0"), Ok(13000));
    assert!(parse_cuda_version("12").is_err());
    assert!(parse_cuda_version("x.y").is_err());
    assert_eq!(parse_compute_capability("8.9"), Ok((8, 9)));
    assert_eq!(parse_arch("Ada Lovelace"), Ok(8));
    assert_eq!(parse_arch("hopper"), Ok(9));
    assert!(parse_arch("fermi").unwrap_err().contains("use one of"));
    assert_eq!(parse_brand("Tesla"), Ok(2));
    assert_eq!(parse_brand("nvidia"), Ok(14));
    assert_eq!(parse_brand("geforce-rtx"), Ok(15));
    assert_eq!(parse_brand("nvidiartx"), Ok(13));
    assert!(parse_brand("radeon").is_err());
}

#[test]
fn uuid_characters_are_restricted() {
    assert!(check_uuid("GPU-0b3b1a6c-1111", "GPU-").is_ok());
    assert!(check_uuid("GPU-../../etc", "GPU-").is_err());
    assert!(check_uuid("MIG-abc", "GPU-").is_err());
    assert!(check_uuid("GPU-", "GPU-").is_err());
}

#[test]
fn mig_capability_by_model() {
    assert!(model_supports_mig(
        "NVIDIA A100-SXM4-80GB",
        ffi::NVML_DEVICE_ARCH_AMPERE
    ));
    assert!(!model_supports_mig(
        "NVIDIA A10",
        ffi::NVML_DEVICE_ARCH_AMPERE
    ));
    assert!(model_supports_mig(
        "NVIDIA H20",
        ffi::NVML_DEVICE_ARCH_HOPPER
    ));
    assert!(!model_supports_mig(
        "Tesla T4",
        ffi::NVML_DEVICE_ARCH_TURING
    ));
    assert!(!model_supports_mig("NVIDIA L20", ffi::NVML_DEVICE_ARCH_ADA));
}
