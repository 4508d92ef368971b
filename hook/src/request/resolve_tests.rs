use gpuhook_node::DeviceRef;

use super::*;
use crate::request::devices::{parse_visible_devices, ListOutcome};
use crate::request::test_support::*;

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

#[test]
fn all_skips_mig_enabled_parents_but_takes_their_mig_devices() {
    assert_eq!(ok("all"), vec![G0, M0, M1, G2]);
    assert_eq!(all_devices(&inventory()), vec![G0, M0, M1, G2]);
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
    assert_eq!(ok("nvidia.com/gpu=all"), vec![G0, M0, M1, G2]);
    assert_eq!(ok("gpu2,mig1:1"), vec![G2, M1]);
    assert_eq!(ok("nvidia.com/gpu=gpu0"), vec![G0]);
}

#[test]
fn pci_of_a_mig_enabled_gpu_in_upper_case_inventory_form() {
    // The inventory spells the A100's bus id in upper case; it is still found (and refused as MIG).
    let e = resolve("3b:00.0").unwrap_err();
    assert!(
        matches!(e, RequestError::MigEnabledGpu { index: 1, .. }),
        "{e}"
    );
}

#[test]
fn deduplicated_in_request_order() {
    assert_eq!(ok(&format!("2,0,{T4_UUID},18:00.0,2")), vec![G2, G0]);
    assert_eq!(
        ok(&format!("1:1,{MIG1_UUID},nvidia.com/gpu=all")),
        vec![M1, G0, M0, G2]
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

#[test]
fn mig_enabled_gpu_as_a_whole_is_refused_with_the_fix() {
    for id in ["1", A100_UUID, "0000:3b:00.0", "gpu1", "nvidia.com/gpu=1"] {
        let e = resolve(id).unwrap_err().to_string();
        assert!(
            e.contains(
                "is GPU 1, which has MIG enabled: select its MIG devices instead (e.g. \"1:0\""
            ),
            "{id}: {e}"
        );
    }
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
