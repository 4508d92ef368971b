//! Knowing a process for sure: pid plus start time, signalled through a pidfd.
//!
//! The control daemon's own pid file lives in its pipe directory, which every MPS tenant can
//! write: a tenant that rewrites it must not make us signal another GPU's daemon. So we never
//! read it. The daemon is our own child (`-f`, see [`crate::daemon_proc`]); what we remember of
//! it across our own restarts is its pid AND start time (`/proc/<pid>/stat` field 22) in a file
//! under the GPU's private directory, and a signal goes through a pidfd opened before the start
//! time is checked, so a reused pid is never signalled.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// A process as we know it: pid and start time (clock ticks since boot).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    pub pid: i32,
    pub start_time: u64,
}

impl Identity {
    /// The identity of `pid` now, when it exists.
    pub fn of(pid: i32) -> Option<Identity> {
        start_time(pid).map(|start_time| Identity { pid, start_time })
    }

    /// `"<pid> <start time>\n"`, the record format.
    pub fn to_record(self) -> String {
        format!("{} {}\n", self.pid, self.start_time)
    }

    pub fn parse_record(text: &str) -> Option<Identity> {
        let mut it = text.split_whitespace();
        let pid = it.next()?.parse::<i32>().ok().filter(|p| *p > 0)?;
        let start_time = it.next()?.parse().ok()?;
        Some(Identity { pid, start_time })
    }
}

/// Field 22 of `/proc/<pid>/stat` (after the parenthesised comm), `None` for a gone process.
pub fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    // rest starts at field 3 (state); field 22 is index 19 from there.
    rest.split_whitespace().nth(19)?.parse().ok()
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

/// A pidfd of a process whose identity was checked after the pidfd was opened.
#[derive(Debug)]
pub struct PidFd {
    fd: OwnedFd,
    pub id: Identity,
}

impl PidFd {
    /// Opens a pidfd for `id.pid` and keeps it only when the process still has `id`'s start time
    /// (checked after opening, so the fd can only refer to that very process).
    pub fn open(id: Identity) -> Option<PidFd> {
        // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
        let rc = unsafe { libc::syscall(libc::SYS_pidfd_open, id.pid, 0) };
        let raw = i32::try_from(rc).ok().filter(|fd| *fd >= 0)?;
        // SAFETY: `raw` is a fresh fd returned by pidfd_open that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        (start_time(id.pid) == Some(id.start_time)).then_some(PidFd { fd, id })
    }

    /// Sends `sig`; false when the process is gone.
    pub fn signal(&self, sig: Signal) -> bool {
        // SAFETY: pidfd_send_signal on our own pidfd with a null siginfo and no flags.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.fd.as_raw_fd(),
                sig as libc::c_int,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        rc == 0
    }

    fn alive(&self) -> bool {
        start_time(self.id.pid) == Some(self.id.start_time) && is_alive(self.id.pid)
    }

    async fn wait_gone(&self, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        while self.alive() {
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        true
    }

    /// SIGTERM (with SIGCONT for a stopped process), `grace`, then SIGKILL. True when gone.
    pub async fn terminate(&self, grace: Duration) -> bool {
        if !self.alive() {
            return true;
        }
        self.signal(Signal::SIGTERM);
        self.signal(Signal::SIGCONT);
        if self.wait_gone(grace).await {
            return true;
        }
        self.signal(Signal::SIGKILL);
        self.wait_gone(Duration::from_secs(2)).await
    }
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
        let pid = i32::try_from(child.id()).unwrap();
        assert!(is_alive(pid));
        assert!(!looks_like_mps_control(pid));
        let id = Identity::of(pid).unwrap();
        // A record with another start time (a reused pid) opens nothing.
        let other = Identity {
            pid,
            start_time: id.start_time + 1,
        };
        assert!(PidFd::open(other).is_none());
        let fd = PidFd::open(id).unwrap();
        let reaper = std::thread::spawn(move || child.wait());
        assert!(fd.terminate(Duration::from_millis(200)).await);
        reaper.join().unwrap().unwrap();
        assert!(!is_alive(pid));
    }

    #[test]
    fn identity_records() {
        let id = Identity {
            pid: 4242,
            start_time: 99,
        };
        assert_eq!(Identity::parse_record(&id.to_record()), Some(id));
        assert_eq!(Identity::parse_record("-1 5"), None);
        assert_eq!(Identity::parse_record("12"), None);
        let me = Identity::of(i32::try_from(std::process::id()).unwrap()).unwrap();
        assert!(me.start_time > 0);
    }
}
