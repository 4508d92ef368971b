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
    assert!(parse_arch("fermi")
        .unwrap_err()
        .to_string()
        .contains("use one of"));
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

/// One Hopper GPU; the sim's validator accepts it, so a test can break one field after parsing.
fn h100_profile() -> NodeProfile {
    let text = r#"
name = "table-test"
driver_version = "570.86.10"
cuda_driver_version = "12.8"
lib_dir = "/usr/lib/x86_64-linux-gnu"
[majors]
nvidia_uvm = 236
nvidia_caps = 237
[[gpus]]
index = 0
minor = 0
uuid = "GPU-0b3b1a6c-1111-2222-3333-444455556666"
pci_bus_id = "00000000:18:00.0"
name = "NVIDIA H100 80GB HBM3"
architecture = "hopper"
compute_capability = "9.0"
brand = "nvidia"
memory_mib = 81559
"#;
    NodeProfile::from_toml_str(text).expect("profile")
}

/// A refused GPU field is typed (GPU, then the field) and reads as the profile author needs it.
#[test]
fn refused_profiles_name_the_gpu_and_the_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut p = h100_profile();
    assert!(Table::from_profile(&p, dir.path().to_path_buf()).is_ok());
    p.gpus[0].pci_bus_id = "18:zz.0".into();
    p.gpus[0].nvlinks = 99;
    let gpu = "GPU-0b3b1a6c-1111-2222-3333-444455556666";
    let err = Table::from_profile(&p, dir.path().to_path_buf()).expect_err("bad bus id");
    let want_bus_id = TableError::Gpu {
        index: 0,
        uuid: gpu.into(),
        error: Box::new(TableError::PciBusId("18:zz.0".into())),
    };
    assert_eq!(err, want_bus_id);
    assert_eq!(
        err.to_string(),
        format!("GPU 0 ({gpu}): PCI bus id \"18:zz.0\" must look like 00000000:07:00.0 (domain:bus:device.function, hex)")
    );
    assert!(
        std::error::Error::source(&err).is_none(),
        "the cause is in the message only"
    );
    p.gpus[0].pci_bus_id = "0000:18:00.0".into();
    let err = Table::from_profile(&p, dir.path().to_path_buf()).expect_err("nvlinks");
    assert_eq!(
        err.to_string(),
        format!("GPU 0 ({gpu}): nvlinks = 99 but NVML knows at most 18 links per GPU")
    );
}
