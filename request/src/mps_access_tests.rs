use super::*;
use crate::mps_check::check_mps_access;
use serde_json::json;
use std::os::unix::fs::PermissionsExt;

/// A gpu-mps-daemon layout: `<root>/mps/GPU-1/{pipe/control,ready}`, every directory 0755 (the
/// pipe directory 0777 and the socket file 0777, as the control daemon leaves them).
fn layout(root: &Path, ready: Option<Value>) -> MpsShare {
    std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o755)).unwrap();
    let pipe = root.join("mps/GPU-1/pipe");
    std::fs::create_dir_all(&pipe).unwrap();
    for d in [root.join("mps"), root.join("mps/GPU-1")] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::set_permissions(&pipe, std::fs::Permissions::from_mode(0o777)).unwrap();
    drop(std::os::unix::net::UnixListener::bind(pipe.join("control")).unwrap());
    std::fs::set_permissions(pipe.join("control"), std::fs::Permissions::from_mode(0o777)).unwrap();
    if let Some(r) = ready {
        std::fs::write(root.join("mps/GPU-1/ready"), r.to_string()).unwrap();
    }
    MpsShare {
        name: "nvidia.com/gpu-mps=0".into(),
        pipe_dir: pipe,
    }
}

fn ready(share: &MpsShare, client_user: Option<u32>) -> Value {
    json!({"uuid": "GPU-1", "pipeDirectory": share.pipe_dir, "clientUser": client_user})
}

fn user(uid: u32) -> ProcessUser {
    ProcessUser {
        uid,
        gid: uid,
        groups: vec![],
    }
}

fn ready_share(t: &Path, client_user: Option<u32>) -> MpsShare {
    let share = layout(t, None);
    let r = ready(&share, client_user);
    std::fs::write(t.join("mps/GPU-1/ready"), r.to_string()).unwrap();
    share
}

#[test]
fn a_share_whose_daemon_is_not_ready_refuses_the_container() {
    let t = tempfile::tempdir().unwrap();
    let share = layout(t.path(), None);
    let err = check_mps_access(std::slice::from_ref(&share), &user(0)).unwrap_err();
    assert!(matches!(err, MpsAccessError::NotReady { .. }), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("nvidia.com/gpu-mps=0") && msg.contains("without MPS limits"),
        "{msg}"
    );
    // A ready file about another pipe directory is no better.
    std::fs::write(
        t.path().join("mps/GPU-1/ready"),
        json!({"pipeDirectory": "/elsewhere"}).to_string(),
    )
    .unwrap();
    let err = check_mps_access(&[share], &user(0)).unwrap_err();
    assert!(matches!(err, MpsAccessError::NotReady { .. }), "{err}");
}

#[test]
fn a_ready_share_admits_root_and_a_user_who_can_reach_it() {
    let t = tempfile::tempdir().unwrap();
    let share = ready_share(t.path(), None);
    check_mps_access(std::slice::from_ref(&share), &user(0)).unwrap();
    check_mps_access(&[share], &user(1000)).unwrap();
}

#[test]
fn a_user_whose_server_cannot_reach_the_pipe_directory_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let share = ready_share(t.path(), None);
    let gpu_dir = t.path().join("mps/GPU-1");
    std::fs::set_permissions(&gpu_dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let err = check_mps_access(std::slice::from_ref(&share), &user(1000)).unwrap_err();
    match &err {
        MpsAccessError::Unreachable { path, need, .. } => {
            assert_eq!((path.as_path(), *need), (gpu_dir.as_path(), "search"));
        }
        e => panic!("{e}"),
    }
    assert!(err.to_string().contains("uid 1000 cannot search"), "{err}");
    // Its group may search it.
    let mut member = user(1000);
    member
        .groups
        .push(std::fs::metadata(&gpu_dir).map(|m| m.gid()).unwrap());
    std::fs::set_permissions(&gpu_dir, std::fs::Permissions::from_mode(0o710)).unwrap();
    check_mps_access(std::slice::from_ref(&share), &member).unwrap();
    // A control socket only root may connect to (what the simulator made before).
    std::fs::set_permissions(&gpu_dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let socket = share.pipe_dir.join("control");
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o755)).unwrap();
    let err = check_mps_access(&[share], &user(1000)).unwrap_err();
    assert!(err.to_string().contains("cannot connect to"), "{err}");
}

#[test]
fn a_share_for_one_user_refuses_every_other() {
    let t = tempfile::tempdir().unwrap();
    let share = ready_share(t.path(), Some(1000));
    check_mps_access(std::slice::from_ref(&share), &user(1000)).unwrap();
    for uid in [0, 2000] {
        let err = check_mps_access(std::slice::from_ref(&share), &user(uid)).unwrap_err();
        assert_eq!(
            err,
            MpsAccessError::WrongUser {
                name: share.name.clone(),
                uid,
                client_user: 1000
            }
        );
        assert!(err.to_string().contains("mpsDaemon.clientUser"), "{err}");
    }
}

#[test]
fn a_server_of_another_user_with_clients_refuses_the_container() {
    let t = tempfile::tempdir().unwrap();
    let share = ready_share(t.path(), None);
    let status = |clients: Value| {
        json!({"gpus": [{"pipeDirectory": share.pipe_dir, "usage": {
            "servers": [4400], "serverUsers": {"4400": 1000}, "clients": clients}}]})
    };
    let write = |v: Value| std::fs::write(t.path().join("mps/status.json"), v.to_string()).unwrap();
    write(status(json!([{"pid": 4500, "server": 4400}])));
    check_mps_access(std::slice::from_ref(&share), &user(1000)).unwrap();
    let err = check_mps_access(std::slice::from_ref(&share), &user(2000)).unwrap_err();
    assert_eq!(
        err,
        MpsAccessError::OtherUser {
            name: share.name.clone(),
            uid: 2000,
            other_uid: 1000,
            server: 4400,
            clients: 1
        }
    );
    assert!(err.to_string().contains("in use by uid 1000"), "{err}");
    // An idle server of another user is replaced at once: no refusal.
    write(status(json!([])));
    check_mps_access(&[share], &user(2000)).unwrap();
}

#[test]
fn the_process_user_is_mapped_to_the_host() {
    let config = json!({
        "process": {"user": {"uid": 1000, "gid": 1000, "additionalGids": [5]}},
        "linux": {
            "uidMappings": [{"containerID": 0, "hostID": 100000, "size": 65536}],
            "gidMappings": [{"containerID": 0, "hostID": 200000, "size": 65536}]
        }
    });
    assert_eq!(
        ProcessUser::of(&config),
        ProcessUser {
            uid: 101000,
            gid: 201000,
            groups: vec![200005]
        }
    );
    assert_eq!(ProcessUser::of(&json!({})), user(0));
    let outside = json!({"process": {"user": {"uid": 70000}},
        "linux": {"uidMappings": [{"containerID": 0, "hostID": 100000, "size": 65536}]}});
    assert_eq!(ProcessUser::of(&outside).uid, 65534);
}

use std::os::unix::fs::MetadataExt;

/// The pipe directory is the container's to write in: a `control` it replaced with a symlink (to
/// a socket the user could use) or a file is not the daemon's socket, so nothing is followed.
#[test]
fn a_control_socket_replaced_in_the_pipe_directory_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let share = ready_share(t.path(), None);
    let socket = share.pipe_dir.join("control");
    let elsewhere = t.path().join("other.sock");
    std::fs::rename(&socket, &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &socket).unwrap();
    let err = check_mps_access(std::slice::from_ref(&share), &user(1000)).unwrap_err();
    assert!(
        matches!(&err, MpsAccessError::NotReady { reason, .. } if reason.contains("not a socket")),
        "{err}"
    );
    std::fs::remove_file(&socket).unwrap();
    std::fs::write(&socket, "").unwrap();
    let err = check_mps_access(std::slice::from_ref(&share), &user(0)).unwrap_err();
    assert!(err.to_string().contains("not a socket"), "{err}");
}
