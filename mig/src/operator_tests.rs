//! The GPU Operator's `default-mig-parted-config` (gpu-operator v26.7.0, verbatim in
//! `shared/reference/mig-parted/`) applied on every MIG product the simulator models, for every
//! config name whose entries cover the product: a config whose profiles all exist on the product
//! gives exactly its devices at placements from the product's table, and a second apply makes no
//! write; a config naming a profile the product lacks is refused before any write (where
//! mig-parted would report success with zero instances, facts §4).

use std::collections::BTreeMap;
use std::path::PathBuf;

use gpuhook_sim::mig_catalog::{MigProduct, PRODUCTS};

use crate::apply::{apply, ApplyOptions, GpuStatus, MigBackend};
use crate::device_id::DeviceId;
use crate::holders::NoHolders;
use crate::profile::MigProfile;
use crate::select::select;
use crate::spec::MigConfigFile;
use crate::test_support::Fake;

fn operator_config() -> MigConfigFile {
    let dir = [
        std::env::var_os("GPUHOOK_MIG_PARTED_REFERENCE").map(PathBuf::from),
        Some(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/reference/mig-parted")),
        Some(PathBuf::from("/work/shared/reference/mig-parted")),
    ]
    .into_iter()
    .flatten()
    .find(|p| p.is_dir())
    .expect("mig-parted reference cases: set GPUHOOK_MIG_PARTED_REFERENCE");
    let text = std::fs::read_to_string(
        dir.join("gpu-operator-0400_configmap-default-mig-parted-config.yaml"),
    )
    .unwrap();
    let cm: serde_json::Value = yaml_serde::from_str(&text).unwrap();
    MigConfigFile::parse(
        cm["data"]["config.yaml"].as_str().unwrap().as_bytes(),
        "default-mig-parted-config",
    )
    .unwrap()
}

/// PCI device ids (`0xDDDD10DE`) of the simulated parts, as the operator config's filters name them.
fn device_id(model: &str) -> u16 {
    match model {
        "NVIDIA A100-SXM4-40GB" => 0x20b0,
        "NVIDIA A100-PCIE-40GB" => 0x20f1,
        "NVIDIA A100-SXM4-80GB" => 0x20b2,
        "NVIDIA A100 80GB PCIe" => 0x20b5,
        "NVIDIA H100 80GB HBM3" => 0x2330,
        "NVIDIA H100 PCIe" => 0x2331,
        "NVIDIA H20" => 0x2329,
        "NVIDIA A30" => 0x20b7,
        other => panic!("no PCI id for {other}"),
    }
}

type Entries = [crate::spec::MigConfigSpec];

/// A config naming a profile the product lacks: refused, the GPU left as it was.
fn check_refused(
    model: &str,
    name: &str,
    entries: &Entries,
    f: &Fake,
    out: Result<crate::Outcome, crate::MigError>,
) {
    // MIG is off, so the profiles are known only once it is on: the apply enables it, finds the
    // profile missing, and turns it off again.
    let out = out.unwrap_or_else(|e| panic!("{model} {name}: {e}"));
    let GpuStatus::Failed(e) = &out.gpus[0].status else {
        panic!("{model} {name}: {out:?}")
    };
    assert!(
        e.contains("has no MIG profile") && e.contains(model) && e.contains("set back to disabled"),
        "{model} {name}: {e}"
    );
    assert!(
        !f.gpus[0].state.mig.enabled() && f.gpus[0].state.instances.is_empty(),
        "{model} {name}"
    );
    // With MIG already on, nothing is written at all.
    let mut on = Fake::enabled(&[model]);
    on.gpus[0].state.device_id = f.gpus[0].state.device_id;
    let e = apply(&mut on, entries, &NoHolders, ApplyOptions::default())
        .map(|o| format!("{o:?}"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("has no MIG profile"), "{model} {name}: {e}");
    assert!(on.writes.is_empty(), "{model} {name}: {:?}", on.writes);
}

/// A config the product can hold: exactly its devices, at the product's placements; no write on
/// a second apply.
fn check_applied(
    product: &MigProduct,
    model: &str,
    name: &str,
    entries: &Entries,
    f: &mut Fake,
    want: &crate::Desired,
    out: crate::Outcome,
) {
    assert!(
        !matches!(out.gpus[0].status, GpuStatus::Failed(_)),
        "{model} {name}: {out:?}"
    );
    let st = &f.gpus[0].state;
    assert_eq!(st.mig.enabled(), want.mig_enabled, "{model} {name}");
    let expect: BTreeMap<String, u32> = want
        .devices
        .iter()
        .map(|(p, n)| (MigProfile::to_string(p), *n))
        .collect();
    assert_eq!(st.layout(), expect, "{model} {name}");
    for gi in &st.instances {
        let spec = product
            .profiles
            .iter()
            .find(|p| p.id == gi.profile_id)
            .unwrap();
        assert!(
            spec.starts.contains(&gi.placement.start) && spec.size == gi.placement.size,
            "{model} {name}: {gi:?}"
        );
    }
    f.writes.clear();
    apply(f, entries, &NoHolders, ApplyOptions::default()).unwrap();
    assert!(
        f.writes.is_empty(),
        "{model} {name}: re-apply wrote {:?}",
        f.writes
    );
}

#[test]
fn operator_default_config_on_every_mig_product() {
    let cfg = operator_config();
    let (mut applied, mut refused) = (0, 0);
    for product in PRODUCTS {
        for model in product.names {
            for (name, entries) in &cfg.configs {
                let mut f = Fake::new(&[model]);
                f.gpus[0].state.device_id = DeviceId {
                    device: device_id(model),
                    vendor: 0x10de,
                    subsystem: None,
                };
                let gpus = f.gpus().unwrap();
                let Some(want) = select(entries, &gpus).unwrap().pop() else {
                    continue;
                };
                let lacks = want
                    .devices
                    .keys()
                    .any(|p| !product.profiles.iter().any(|x| x.name == p.gi_name()));
                let result = apply(&mut f, entries, &NoHolders, ApplyOptions::default());
                if lacks {
                    check_refused(model, name, entries, &f, result);
                    refused += 1;
                } else {
                    let out = result.unwrap_or_else(|e| panic!("{model} {name}: {e}"));
                    check_applied(product, model, name, entries, &mut f, &want, out);
                    applied += 1;
                }
            }
        }
    }
    // Every part gets at least all-disabled, all-enabled and its own all-<profile> configs.
    assert!(applied >= 9 * 3, "applied {applied}, refused {refused}");
    assert!(refused > 0);
}
