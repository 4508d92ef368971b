use gpuhook_node::{DeviceRef, MigDevice};

use super::*;
use crate::devices::{parse_visible_devices, ListOutcome};
use crate::test_support::*;

const ENV: RequestSource = RequestSource::EnvVar;
const KIND: &str = "nvidia.com/gpu";

fn sel(s: &str) -> DeviceSelection {
    match parse_visible_devices(s, ENV).unwrap() {
        ListOutcome::Selection(sel) => sel,
        other => panic!("{s}: {other:?}"),
    }
}

fn resolve(s: &str) -> Result<Vec<DeviceRef>, RequestError> {
    resolve_selection(&sel(s), &inventory(), ENV, KIND).map(|r| r.devices)
}

fn ok(s: &str) -> Vec<DeviceRef> {
    resolve(s).unwrap_or_else(|e| panic!("{s}: {e}"))
}

const G0: DeviceRef = DeviceRef::Gpu { index: 0 };
const G2: DeviceRef = DeviceRef::Gpu { index: 2 };
const M0: DeviceRef = DeviceRef::Mig {
    parent_index: 1,
    index: 0,
};
const M1: DeviceRef = DeviceRef::Mig {
    parent_index: 1,
    index: 1,
};
const G1: DeviceRef = DeviceRef::Gpu { index: 1 };

/// libnvidia-container `src/cli/common.c` `select_devices`: `all` = `select_all_gpu_devices`
/// (every GPU, the MIG-enabled A100 included) then `select_all_mig_devices`.
#[test]
fn all_is_every_gpu_and_every_mig_device() {
    assert_eq!(ok("all"), vec![G0, G1, M0, M1, G2]);
    assert_eq!(all_devices(&inventory()), vec![G0, G1, M0, M1, G2]);
    assert_eq!(ok("none"), Vec::<DeviceRef>::new());
}

#[test]
fn every_form_resolves() {
    assert_eq!(ok("2"), vec![G2]);
    assert_eq!(ok(T4_UUID), vec![G0]);
    assert_eq!(
        ok(&T4_UUID.to_uppercase().replacen("GPU-", "gpu-", 1)),
        vec![G0]
    );
    assert_eq!(ok("0000:18:00.0"), vec![G0]);
    assert_eq!(ok("18:00.0"), vec![G0]);
    assert_eq!(ok("00000000:86:00.0"), vec![G2]);
    assert_eq!(ok(MIG1_UUID), vec![M1]);
    assert_eq!(ok(&MIG1_UUID.to_lowercase()), vec![M1]);
    assert_eq!(ok(&format!("MIG-{A100_UUID}/8/0")), vec![M1]);
    assert_eq!(ok("1:0"), vec![M0]);
    assert_eq!(ok("nvidia.com/gpu=0"), vec![G0]);
    assert_eq!(ok("nvidia.com/gpu=1:1"), vec![M1]);
    assert_eq!(ok(&format!("nvidia.com/gpu={MIG0_UUID}")), vec![M0]);
    assert_eq!(ok("nvidia.com/gpu=all"), vec![G0, G1, M0, M1, G2]);
    assert_eq!(ok("gpu2,mig1:1"), vec![G2, M1]);
    assert_eq!(ok("nvidia.com/gpu=gpu0"), vec![G0]);
}

#[test]
fn pci_of_a_mig_enabled_gpu_in_upper_case_inventory_form() {
    // The inventory spells the A100's bus id in upper case; it is still found.
    assert_eq!(ok("3b:00.0"), vec![G1]);
}

#[test]
fn deduplicated_in_request_order() {
    assert_eq!(ok(&format!("2,0,{T4_UUID},18:00.0,2")), vec![G2, G0]);
    assert_eq!(
        ok(&format!("1:1,{MIG1_UUID},nvidia.com/gpu=all")),
        vec![M1, G0, G1, M0, G2]
    );
}

#[test]
fn unknown_devices_name_id_and_source() {
    // PCI bus ids are reported normalised.
    for id in [
        "3",
        "GPU-ffff",
        "00000000:99:00.0",
        "MIG-ffff",
        "MIG-GPU-ffff/1/0",
        "1:5",
        "5:0",
        "gpu9",
        "mig0:0",
        "foo",
    ] {
        let e = resolve(id).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.starts_with(&format!(
                "unknown device {id:?} requested by NVIDIA_VISIBLE_DEVICES"
            )),
            "{id}: {msg}"
        );
        assert!(
            msg.contains("this node has 3 GPU(s) and 2 MIG device(s)"),
            "{msg}"
        );
        // What does exist, by index and UUID.
        assert!(
            msg.contains(&format!(
                ": 0 ({T4_UUID}), 1 ({A100_UUID}, MIG enabled), 1:0 ({MIG0_UUID}), 1:1 ({MIG1_UUID}), 2 ({H100_UUID})"
            )),
            "{msg}"
        );
    }
    assert!(resolve("0000:99:00.0")
        .unwrap_err()
        .to_string()
        .contains("\"00000000:99:00.0\""));
    let e = resolve("nvidia.com/gpu=7").unwrap_err().to_string();
    assert!(e.starts_with("unknown device \"nvidia.com/gpu=7\""), "{e}");
    // MIG index of a GPU without MIG.
    assert!(resolve("0:0").is_err());
}

/// Issue #13.3: a MIG-enabled GPU named by index, UUID or PCI bus id is that GPU's node, as
/// libnvidia-container's `select_gpu_device` (`src/cli/common.c`) selects it whatever its MIG
/// mode; NVIDIA's device plugin with MIG strategy `none` hands out such UUIDs.
#[test]
fn mig_enabled_gpu_as_a_whole_is_its_gpu_node() {
    for id in ["1", A100_UUID, "0000:3b:00.0", "gpu1", "nvidia.com/gpu=1"] {
        assert_eq!(ok(id), vec![G1], "{id}");
    }
    // Its MIG device and the GPU itself: both, once each.
    assert_eq!(ok(&format!("1:0,{A100_UUID},1")), vec![M0, G1]);
}

/// The list of what exists is bounded: a node with many MIG devices does not make the error
/// message as long as its inventory.
#[test]
fn unknown_device_hint_is_bounded() {
    let mut inv = inventory();
    let template = inv.gpus[1].mig_devices[0].clone();
    inv.gpus[1].mig_devices = (0..100)
        .map(|i| MigDevice {
            index: i,
            ..template.clone()
        })
        .collect();
    let e = resolve_selection(&sel("9"), &inv, ENV, KIND)
        .unwrap_err()
        .to_string();
    assert!(e.contains("and 87 more"), "{e}");
    assert!(e.len() < 2000, "{} bytes", e.len());
}

#[test]
fn foreign_cdi_names_are_reported_not_resolved() {
    let r = resolve_selection(
        &sel("example.com/net=eth0,0,example.com/net=eth0"),
        &inventory(),
        ENV,
        KIND,
    )
    .unwrap();
    assert_eq!(r.devices, vec![G0]);
    assert_eq!(
        r.foreign_cdi,
        vec![QualifiedName::parse("example.com/net=eth0").unwrap()]
    );
    // With another kind configured, nvidia.com/gpu names are the foreign ones.
    let r = resolve_selection(
        &sel("nvidia.com/gpu=0,acme.io/gpu=0"),
        &inventory(),
        ENV,
        "acme.io/gpu",
    )
    .unwrap();
    assert_eq!(r.devices, vec![G0]);
    assert_eq!(r.foreign_cdi.len(), 1);
}

#[test]
fn empty_inventory() {
    let mut inv = inventory();
    inv.gpus.clear();
    assert!(resolve_selection(&DeviceSelection::All, &inv, ENV, KIND)
        .unwrap()
        .devices
        .is_empty());
    let e = resolve_selection(&sel("0"), &inv, ENV, KIND)
        .unwrap_err()
        .to_string();
    assert!(e.contains("this node has 0 GPU(s)"), "{e}");
}
