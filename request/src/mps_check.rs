//! The start checks of [`crate::mps_access`] for one container (file reads only).

use std::path::{Path, PathBuf};

use gpuhook_node::bounded::read_bounded;
use serde_json::Value;

use crate::mps_access::{MpsAccessError, MpsShare, ProcessUser};

/// Checks every share of a container running as `user`; the first problem is the error.
pub fn check_mps_access(shares: &[MpsShare], user: &ProcessUser) -> Result<(), MpsAccessError> {
    for share in shares {
        let ready = read_ready(share)?;
        if let Some(client_user) = ready["clientUser"]
            .as_u64()
            .and_then(|u| u32::try_from(u).ok())
        {
            if client_user != user.uid {
                return Err(MpsAccessError::WrongUser {
                    name: share.name.clone(),
                    uid: user.uid,
                    client_user,
                });
            }
        }
        control_socket(share)?;
        if user.uid != 0 {
            reachable(share, user)?;
        }
        other_user(share, user)?;
    }
    Ok(())
}

/// The GPU's `ready` file, which must name `share`'s pipe directory.
fn read_ready(share: &MpsShare) -> Result<Value, MpsAccessError> {
    let not_ready = |reason: String| MpsAccessError::NotReady {
        name: share.name.clone(),
        reason,
    };
    let Some(gpu_dir) = share.pipe_dir.parent() else {
        return Err(not_ready(format!(
            "{} is not a gpu-mps-daemon pipe directory",
            share.pipe_dir.display()
        )));
    };
    let path = gpu_dir.join("ready");
    let bytes =
        read_bounded(&path, MAX_READY).map_err(|e| not_ready(format!("no ready file: {e}")))?;
    let ready: Value = serde_json::from_slice(&bytes)
        .map_err(|e| not_ready(format!("{}: {e}", path.display())))?;
    if ready["pipeDirectory"].as_str().map(Path::new) != Some(share.pipe_dir.as_path()) {
        return Err(not_ready(format!(
            "{} is not about {}",
            path.display(),
            share.pipe_dir.display()
        )));
    }
    Ok(ready)
}

/// Bound of a `ready` file.
const MAX_READY: u64 = 64 * 1024;
/// Bound of gpu-mps-daemon's `status.json`.
const MAX_STATUS: u64 = 16 << 20;

/// `user` can search every directory down to the pipe directory, write in it, and write to its
/// control socket (what its MPS server, running as that user on the host, needs).
fn reachable(share: &MpsShare, user: &ProcessUser) -> Result<(), MpsAccessError> {
    let socket = share.pipe_dir.join("control");
    let mut steps: Vec<(PathBuf, u32, &'static str)> = share
        .pipe_dir
        .ancestors()
        .skip(1)
        .map(|a| (a.to_path_buf(), 1, "search"))
        .collect();
    steps.reverse();
    steps.push((share.pipe_dir.clone(), 3, "write to and search"));
    steps.push((socket, 2, "connect to"));
    for (path, bits, need) in steps {
        let meta = std::fs::metadata(&path).map_err(|e| MpsAccessError::NotReady {
            name: share.name.clone(),
            reason: format!("{}: {e}", path.display()),
        })?;
        if !user.may(&meta, bits) {
            use std::os::unix::fs::{MetadataExt, PermissionsExt};
            return Err(MpsAccessError::Unreachable {
                name: share.name.clone(),
                uid: user.uid,
                path,
                need,
                mode: meta.permissions().mode() & 0o7777,
                owner: meta.uid(),
                group: meta.gid(),
            });
        }
    }
    Ok(())
}

/// `<pipe>/control` is a socket, not followed: the container can write in the pipe directory, so
/// a link or file it put there is not the daemon's socket (and no link of its is followed).
fn control_socket(share: &MpsShare) -> Result<(), MpsAccessError> {
    use std::os::unix::fs::FileTypeExt;
    let socket = share.pipe_dir.join("control");
    let not_ready = |reason: String| MpsAccessError::NotReady {
        name: share.name.clone(),
        reason,
    };
    let meta = std::fs::symlink_metadata(&socket)
        .map_err(|e| not_ready(format!("{}: {e}", socket.display())))?;
    if !meta.file_type().is_socket() {
        return Err(not_ready(format!("{} is not a socket", socket.display())));
    }
    Ok(())
}

/// A server of another user with clients, per gpu-mps-daemon's `status.json` (absent or
/// unreadable: nothing known, no refusal).
fn other_user(share: &MpsShare, user: &ProcessUser) -> Result<(), MpsAccessError> {
    let Some(root) = share.pipe_dir.parent().and_then(Path::parent) else {
        return Ok(());
    };
    let Ok(bytes) = read_bounded(&root.join("status.json"), MAX_STATUS) else {
        return Ok(());
    };
    let Ok(status) = serde_json::from_slice::<Value>(&bytes) else {
        return Ok(());
    };
    let pipe = share.pipe_dir.to_string_lossy();
    let Some(gpu) = status["gpus"]
        .as_array()
        .and_then(|g| g.iter().find(|g| g["pipeDirectory"] == *pipe))
    else {
        return Ok(());
    };
    let usage = &gpu["usage"];
    let Some(users) = usage["serverUsers"].as_object() else {
        return Ok(());
    };
    for (server, uid) in users {
        let (Ok(server), Some(other_uid)) = (
            server.parse::<u32>(),
            uid.as_u64().and_then(|u| u32::try_from(u).ok()),
        ) else {
            continue;
        };
        let clients = usage["clients"]
            .as_array()
            .map_or(0, |c| c.iter().filter(|c| c["server"] == server).count());
        if other_uid != user.uid && clients > 0 {
            return Err(MpsAccessError::OtherUser {
                name: share.name.clone(),
                uid: user.uid,
                other_uid,
                server,
                clients,
            });
        }
    }
    Ok(())
}
