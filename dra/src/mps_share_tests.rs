//! The ceiling of a GPU's shares and the environment of a share's clients.
#![allow(clippy::unwrap_used)]

use super::*;

fn share(pct: u32, mib: Option<u64>) -> ClaimMps {
    ClaimMps {
        uuids: vec!["GPU-a".into()],
        active_thread_percentage: pct,
        pinned_limits_mib: vec![mib],
        shared: true,
    }
}

#[test]
fn the_ceiling_is_the_largest_share() {
    let c = ceiling(&[share(30, Some(8192)), share(50, Some(4096))]).unwrap();
    assert_eq!(c.active_thread_percentage, 50);
    assert_eq!(c.pinned_limits_mib, [Some(8192)]);
    assert!(ceiling(&[]).is_none());
}

#[test]
fn a_share_gets_its_own_limits_in_its_clients_environment() {
    assert_eq!(
        client_env(&share(30, Some(8192))),
        [
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30",
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=8192M"
        ]
    );
}

#[test]
fn shared_dirs_are_told_apart_from_claim_dirs() {
    let root = Path::new("/r/mps");
    assert!(is_shared_dir(root, &layout(root, "GPU-a").dir));
    assert!(!is_shared_dir(
        root,
        &crate::mps::claim_layout(root, "uid").dir
    ));
}
