#![allow(clippy::unwrap_used)]

use super::*;

fn entry(state: ClaimState) -> ClaimEntry {
    ClaimEntry {
        state,
        namespace: "ns".into(),
        name: "c".into(),
        devices: vec![PreparedDevice {
            requests: vec!["gpu".into()],
            pool: "node-a".into(),
            device: "gpu-0".into(),
            cdi_device_ids: vec!["k8s.gpu.nvidia.com/claim=u1-gpu-0".into()],
            share_id: None,
        }],
        mps_dir: None,
        mig: Vec::new(),
    }
}

#[test]
fn survives_a_restart_of_the_same_boot_only() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("checkpoint.json");
    let mut cp = Checkpoint::load(&path, "boot-1").unwrap();
    cp.put("u1", entry(ClaimState::PrepareCompleted)).unwrap();
    cp.put("u2", entry(ClaimState::PrepareStarted)).unwrap();
    cp.remove("u2").unwrap();
    let again = Checkpoint::load(&path, "boot-1").unwrap();
    assert_eq!(again.get("u1"), Some(&entry(ClaimState::PrepareCompleted)));
    assert!(again.get("u2").is_none());
    let rebooted = Checkpoint::load(&path, "boot-2").unwrap();
    assert!(rebooted.get("u1").is_none());
}

#[test]
fn a_corrupt_checkpoint_is_an_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("checkpoint.json");
    std::fs::write(&path, "{not json").unwrap();
    let err = Checkpoint::load(&path, "b").unwrap_err().to_string();
    assert!(
        err.contains("checkpoint.json") && err.contains("move it away"),
        "{err}"
    );
}
