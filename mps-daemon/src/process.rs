//! Finding and stopping a control daemon by the pid in its pid file.
//!
//! `nvidia-cuda-mps-control -d` forks away from us, so we cannot wait on it; we know it only by
//! the pid it writes into its pipe directory. Before signalling that pid we check that it still
//! is an MPS control process (pids get reused), and we signal its process group when it leads
//! one, so that the MPS servers it started go with it.

use std::path::Path;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::{getpgid, Pid};

/// Reads a pid file (`1234\n`).
pub fn read_pid(path: &Path) -> Option<i32> {
    let text = std::fs::read_to_string(path).ok()?;
    text.trim().parse::<i32>().ok().filter(|p| *p > 0)
}

/// True when `pid` exists and is not a zombie.
pub fn is_alive(pid: i32) -> bool {
    match kill(Pid::from_raw(pid), None) {
        Ok(()) | Err(Errno::EPERM) => {}
        Err(_) => return false,
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // Field 3 (after the parenthesised comm) is the state.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_none_or(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// True when `pid` runs an MPS control binary (its argv[0] or exe mentions `mps-control`).
pub fn looks_like_mps_control(pid: i32) -> bool {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let argv0 = cmdline.split(|b| *b == 0).next().unwrap_or_default();
    if String::from_utf8_lossy(argv0).contains("mps-control") {
        return true;
    }
    std::fs::read_link(format!("/proc/{pid}/exe"))
        .map(|p| p.to_string_lossy().contains("mps-control"))
        .unwrap_or(false)
}

fn signal(pid: i32, sig: Signal) {
    let p = Pid::from_raw(pid);
    // The daemon normally leads its own session/group (it daemonised); then take the group.
    if getpgid(Some(p)) == Ok(p) && killpg(p, sig).is_ok() {
        return;
    }
    let _ = kill(p, sig);
}

/// Waits up to `timeout` for `pid` to disappear; true when it did.
pub async fn wait_gone(pid: i32, timeout: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if !is_alive(pid) {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// SIGTERM, up to `grace` to exit, then SIGKILL. Returns false when it still exists after that.
pub async fn terminate(pid: i32, grace: Duration) -> bool {
    if !is_alive(pid) {
        return true;
    }
    signal(pid, Signal::SIGTERM);
    // A stopped (wedged) process gets SIGCONT so that SIGTERM can act.
    signal(pid, Signal::SIGCONT);
    if wait_gone(pid, grace).await {
        return true;
    }
    signal(pid, Signal::SIGKILL);
    wait_gone(pid, Duration::from_secs(2)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn terminate_kills_a_process_that_ignores_sigterm() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "trap '' TERM; while :; do sleep 0.05; done"])
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        assert!(is_alive(pid));
        assert!(!looks_like_mps_control(pid));
        let reaper = std::thread::spawn(move || child.wait());
        assert!(terminate(pid, Duration::from_millis(200)).await);
        reaper.join().unwrap().unwrap();
        assert!(!is_alive(pid));
    }

    #[test]
    fn pid_file_parsing() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("pid");
        std::fs::write(&p, "4242\n").unwrap();
        assert_eq!(read_pid(&p), Some(4242));
        std::fs::write(&p, "-1").unwrap();
        assert_eq!(read_pid(&p), None);
        assert_eq!(read_pid(&t.path().join("none")), None);
    }
}
