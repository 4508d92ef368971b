//! The rule of the `owner` module as a table (issue 22, D10): who acts in a directory, given its
//! owner, its mount and what is known of the container.

use super::{decide, host_user, Act, Trust};

const ROOTFS: u64 = 10;
const DEV: u64 = 11;
const VOLUME: u64 = 42;

fn trust(user: Option<(u32, u32)>) -> Trust {
    Trust {
        root_owner: 0,
        own_mounts: vec![ROOTFS, DEV],
        user,
    }
}

#[test]
fn the_image_tree_and_the_runtime_dev_are_roots() {
    for user in [None, Some((0, 0)), Some((1000, 1000))] {
        assert_eq!(decide((0, 0), ROOTFS, &trust(user)), Act::AsRoot);
        assert_eq!(decide((0, 0), DEV, &trust(user)), Act::AsRoot);
    }
}

#[test]
fn a_directory_someone_else_owns_is_theirs_on_any_mount() {
    for mount in [ROOTFS, VOLUME] {
        assert_eq!(
            decide((1000, 100), mount, &trust(None)),
            Act::As {
                uid: 1000,
                gid: 100
            }
        );
    }
}

/// D10: root-owned, on a volume (a host directory): never root's unless the container's user is
/// root (who could write there anyway); the container's user where known, else refused.
#[test]
fn a_root_owned_volume_is_written_with_the_container_users_rights() {
    assert_eq!(
        decide((0, 0), VOLUME, &trust(Some((1000, 1000)))),
        Act::As {
            uid: 1000,
            gid: 1000
        }
    );
    assert_eq!(decide((0, 0), VOLUME, &trust(Some((0, 0)))), Act::AsRoot);
    assert_eq!(decide((0, 0), VOLUME, &trust(None)), Act::Refuse);
}

/// A user-namespaced container: its root is the root directory's owner (100000 here).
#[test]
fn user_namespaced_ids_are_shifted_by_the_roots_owner() {
    let root = (100_000, 100_000);
    assert_eq!(host_user((1000, 1000), root), (101_000, 101_000));
    let t = Trust {
        root_owner: 100_000,
        own_mounts: vec![ROOTFS],
        user: Some(host_user((0, 0), root)),
    };
    assert_eq!(decide((100_000, 100_000), VOLUME, &t), Act::AsRoot);
}

#[test]
fn the_fdinfo_fallback_agrees_with_statx() {
    let dir = std::fs::File::open("/").unwrap();
    let fd = std::os::fd::AsFd::as_fd(&dir);
    let via_fdinfo = super::fdinfo_mount_id(fd).unwrap();
    if let Ok(Some(via_statx)) = super::statx_mount_id(fd) {
        assert_eq!(via_statx, via_fdinfo);
    }
    assert_eq!(super::mount_id(fd).unwrap(), via_fdinfo);
    assert_eq!(
        super::parse_fdinfo_mount_id("pos:\t0\nflags:\t02000000\nmnt_id:\t29\nino:\t2\n"),
        Some(29)
    );
    assert_eq!(super::parse_fdinfo_mount_id("pos:\t0\n"), None);
}
