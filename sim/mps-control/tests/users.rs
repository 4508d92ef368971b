//! Clients that are not root, as NVIDIA's daemon serves them: the pipe directory and control
//! socket are open to every user, a client is the user it runs as (`SO_PEERCRED`), and its MPS
//! server runs as that user and must reach the control socket itself (NVIDIA MPS docs, "On a
//! Multi-user System"; strace of driver 580.126.09 in bottlerocket-os/bottlerocket#4673: pipe
//! directory 0777, a uid-1000 server failing on a 0700 ancestor).
// Test support: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};

use common::*;

fn root() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        eprintln!("skipped: needs root to run clients as another user");
    }
    root
}

fn open_dir(p: &Path) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// The simulator as a CUDA client of uid 1000 (claiming uid 0, which only root may), through
/// `pipe`; returns (exit code, stdout, stderr).
fn client_as_1000(mps: &Mps, pipe: &Path) -> (i32, String, String) {
    let out = Command::new("setpriv")
        .args(["--reuid", "1000", "--regid", "1000", "--clear-groups", BIN])
        .args(["--sim-client", "--uid", "0", "--hold", "2"])
        .env_clear()
        .env("CUDA_MPS_PIPE_DIRECTORY", pipe)
        .env("CUDA_MPS_LOG_DIRECTORY", mps.log())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn uid_of(pid: u32) -> Option<u32> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[test]
fn pipe_directory_and_control_socket_are_open_to_every_user() {
    let mps = Mps::new();
    mps.start_ok();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode(&mps.pipe()), 0o777);
    assert_eq!(mode(&mps.pipe().join("control")), 0o777);
    mps.ctl("quit");
}

#[test]
fn a_client_of_uid_1000_attaches_to_a_server_running_as_uid_1000() {
    if !root() {
        return;
    }
    let mps = Mps::new();
    open_dir(mps.dir.path());
    mps.start_ok();
    let (code, out, err) = client_as_1000(&mps, &mps.pipe());
    // Before: the socket was 0755 root's, so a uid-1000 client found no daemon (exit 4) and
    // a real CUDA application would have run without MPS, unlimited.
    assert_eq!(code, 0, "stdout {out}; stderr {err}");
    let server: u32 = out
        .lines()
        .find_map(|l| l.strip_prefix("server="))
        .and_then(|r| r.split_whitespace().next())
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        mps.control_log()
            .contains(&format!("Starting new server {server} for user 1000")),
        "the client is the user it runs as, whatever it claims:\n{}",
        mps.control_log()
    );
    assert_eq!(mps.ctl("get_server_list").trim(), server.to_string());
    assert_eq!(uid_of(server), Some(1000), "the server runs as its user");
    mps.ctl("quit");
}

/// Unmounts on drop.
struct Bind(std::path::PathBuf);

impl Drop for Bind {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn a_server_that_cannot_reach_the_pipe_directory_refuses_its_client() {
    if !root() {
        return;
    }
    let mps = Mps::new();
    open_dir(mps.dir.path());
    // The daemon's pipe directory under a 0700 directory (bottlerocket's /run/nvidia), given to
    // the client through a bind mount as a container gets it.
    let private = mps.dir.path().join("private");
    std::fs::create_dir_all(private.join("pipe")).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    let mut cmd = mps.cmd();
    cmd.env("CUDA_MPS_PIPE_DIRECTORY", private.join("pipe"));
    let st = cmd.arg("-d").stdin(Stdio::null()).status().unwrap();
    assert!(st.success());
    let seen = mps.dir.path().join("container-view");
    std::fs::create_dir(&seen).unwrap();
    let st = Command::new("mount")
        .arg("--bind")
        .arg(private.join("pipe"))
        .arg(&seen)
        .status()
        .unwrap();
    assert!(st.success(), "bind mount");
    let _bind = Bind(seen.clone());
    let (code, out, err) = client_as_1000(&mps, &seen);
    assert_eq!(code, 5, "refused, never run without MPS: {out} {err}");
    assert!(
        err.contains("user 1000") && err.contains("Permission denied"),
        "{err}"
    );
    let ctl = Command::new(BIN)
        .env("CUDA_MPS_PIPE_DIRECTORY", private.join("pipe"))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(b"quit\n")?;
            c.wait()
        });
    assert!(ctl.unwrap().success());
}
