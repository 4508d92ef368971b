//! Users: the pipe directory and socket every user can reach, and who a client is.

use crate::config::Paths;
use anyhow::{Context, Result};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;

/// Like the real daemon, the pipe directory and the control socket are open to every user: a
/// root control daemon serves clients of any uid and runs each user's MPS server as that user,
/// which connects back to `control` (NVIDIA MPS docs, "Starting and Stopping MPS on Linux / On a
/// Multi-user System"; the pipe directory is 0777 and a uid-1000 server connects to `control`
/// there: strace of driver 580.126.09, bottlerocket-os/bottlerocket#4673). Each ancestor must
/// still be searchable by that user, which the daemon does not change (the same report: a 0700
/// parent made every non-root server fail).
pub fn open_to_every_user(paths: &Paths) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    for p in [paths.pipe_dir.clone(), paths.socket()] {
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o777))
            .with_context(|| format!("making {} accessible to MPS clients", p.display()))?;
    }
    Ok(())
}

/// The connecting process's uid and gid (`SO_PEERCRED`), as the real daemon authenticates its
/// clients; `None` when the kernel does not say.
pub fn peer_credentials(stream: &UnixStream) -> Option<(u32, u32)> {
    // SAFETY: `ucred` is plain old data; all-zero is a valid value.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = libc::socklen_t::try_from(std::mem::size_of::<libc::ucred>()).ok()?;
    // SAFETY: getsockopt writes at most `len` bytes into `cred`, a live local of that size.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            std::ptr::addr_of_mut!(cred).cast(),
            &mut len,
        )
    };
    (rc == 0).then_some((cred.uid, cred.gid))
}
