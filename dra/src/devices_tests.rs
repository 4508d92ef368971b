//! Device names and attributes as NVIDIA's driver publishes them (dra-facts §5).
#![allow(clippy::unwrap_used)]

use std::path::Path;

use serde_json::json;

use super::*;
use crate::testkit::{gpu_uuid, inventory, mig_uuid};

#[test]
fn gpus_and_mig_devices_with_nvidia_attributes() {
    let devs = catalogue(&inventory(), Path::new("/nonexistent"));
    let names: Vec<&str> = devs.iter().map(|d| d.name.as_str()).collect();
    // GPU 1 is in MIG mode: only its MIG devices are published.
    assert_eq!(
        names,
        ["gpu-0", "gpu-1-mig-1g10gb-9-0", "gpu-1-mig-1g10gb-10-0"]
    );
    let g = &devs[0].attributes;
    assert_eq!(g["type"], json!({"string": "gpu"}));
    assert_eq!(g["uuid"], json!({"string": gpu_uuid(0)}));
    assert_eq!(g["productName"], json!({"string": "NVIDIA H100 80GB HBM3"}));
    assert_eq!(g["architecture"], json!({"string": "Hopper"}));
    assert_eq!(g["cudaComputeCapability"], json!({"version": "9.0.0"}));
    assert_eq!(g["driverVersion"], json!({"version": "570.158.1"}));
    assert_eq!(g["cudaDriverVersion"], json!({"version": "12.8.0"}));
    assert_eq!(g[PCI_BUS_ID], json!({"string": "0000:18:00.0"}));
    assert_eq!(g["minor"], json!({"int": 0}));
    assert_eq!(devs[0].memory_bytes, 81559 << 20);
    let m = &devs[1].attributes;
    assert_eq!(m["type"], json!({"string": "mig"}));
    assert_eq!(m["parentUUID"], json!({"string": gpu_uuid(1)}));
    assert_eq!(m["uuid"], json!({"string": mig_uuid(0)}));
    assert_eq!(m["profile"], json!({"string": "1g.10gb"}));
    assert_eq!(devs[1].memory_bytes, 9856 << 20);
}

#[test]
fn versions_and_names_are_normalised() {
    assert_eq!(semver("570.158.01").as_deref(), Some("570.158.1"));
    assert_eq!(semver("12.8").as_deref(), Some("12.8.0"));
    assert_eq!(semver("abc"), None);
    assert_eq!(sanitize("1g.10gb+me"), "1g10gbme");
    assert_eq!(pci_address("00000000:07:00.0"), "0000:07:00.0");
}

#[test]
fn pcie_root_from_sysfs_link() {
    let dir = tempfile::tempdir().unwrap();
    let devs = dir.path().join("sys/bus/pci/devices");
    std::fs::create_dir_all(&devs).unwrap();
    std::os::unix::fs::symlink(
        "../../../devices/pci0000:15/0000:15:01.0/0000:18:00.0",
        devs.join("0000:18:00.0"),
    )
    .unwrap();
    assert_eq!(
        pcie_root(dir.path(), "0000:18:00.0").as_deref(),
        Some("pci0000:15")
    );
    let cat = catalogue(&inventory(), dir.path());
    assert_eq!(
        cat[0].attributes[PCIE_ROOT],
        json!({"string": "pci0000:15"})
    );
}
