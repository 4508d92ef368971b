use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use super::*;
use crate::devices::catalogue;
use crate::testkit::inventory;

fn mig_names(devs: &[NodeDevice]) -> Vec<String> {
    devs.iter()
        .filter(|d| d.is_mig())
        .map(|d| d.name.clone())
        .collect()
}

fn held(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(d, c)| (d.to_string(), c.to_string()))
        .collect()
}

/// The test inventory with GPU 1's MIG devices removed (a re-partition emptied it).
fn emptied() -> (Arc<Inventory>, Vec<NodeDevice>) {
    let mut inv = inventory();
    let gone: Vec<String> = inv.gpus[1]
        .mig_devices
        .iter()
        .map(|m| m.uuid.clone())
        .collect();
    assert!(
        !gone.is_empty(),
        "the test inventory has MIG devices on GPU 1"
    );
    inv.gpus[1].mig_devices.clear();
    let devs = catalogue(&inv, Path::new("/nonexistent"));
    (Arc::new(inv), devs)
}

#[test]
fn unheld_devices_follow_the_node_and_held_ones_stay_tainted_until_unprepared() {
    let inv = inventory();
    let before = catalogue(&inv, Path::new("/nonexistent"));
    let old = Layout::new(Arc::new(inv), before.clone());
    let gone: Vec<&NodeDevice> = before
        .iter()
        .filter(|d| d.is_mig() && d.gpu_uuid == old.inventory.gpus[1].uuid)
        .collect();
    let (inv2, fresh) = emptied();

    // Nothing held: exactly the new catalogue.
    let next = old.next(inv2.clone(), fresh.clone(), &BTreeMap::new());
    assert_eq!(*next.devices, fresh);
    assert!(next.retired.is_empty());

    // One removed device held by a claim: kept (once), published with its UUID to taint.
    let h = held(&[(&gone[0].name, "ns/claim")]);
    let next = old.next(inv2.clone(), fresh.clone(), &h);
    assert_eq!(next.retired, vec![gone[0].name.clone()]);
    assert_eq!(next.devices.len(), fresh.len() + 1);
    let (devs, taint) = next.published(&h);
    assert!(mig_names(&devs).contains(&gone[0].name));
    assert_eq!(taint, vec![gone[0].uuid.clone()]);
    // A second re-read while still held keeps it, without a duplicate.
    let again = next.next(inv2.clone(), fresh.clone(), &h);
    assert_eq!(again.devices.len(), fresh.len() + 1);

    // Unprepared: no longer published, nothing tainted.
    let (devs, taint) = next.published(&BTreeMap::new());
    assert_eq!(devs, fresh);
    assert!(taint.is_empty());
}

#[test]
fn a_held_device_still_present_is_not_retired() {
    let inv = inventory();
    let devs = catalogue(&inv, Path::new("/nonexistent"));
    let old = Layout::new(Arc::new(inv.clone()), devs.clone());
    let h = held(&[(&devs[0].name, "ns/c")]);
    let next = old.next(Arc::new(inv), devs.clone(), &h);
    assert!(next.retired.is_empty());
    assert_eq!(*next.devices, devs);
}
