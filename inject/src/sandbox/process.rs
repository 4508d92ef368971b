//! The parent's side of a sandboxed process: waiting for it (woken by a pidfd at its exit,
//! killed after the timeout) and killing it when dropped unwaited.

use super::SandboxError;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

/// A pidfd for our child `pid` (readable once it exits), or `None` where the kernel has none.
fn pidfd_open(pid: libc::pid_t) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return None;
    }
    let fd = RawFd::try_from(fd).ok()?;
    // SAFETY: the descriptor is fresh and owned by nobody else.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Block until `fd` is readable or `timeout` passes (the caller then checks which).
fn wait_readable(fd: &OwnedFd, timeout: Duration) {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = libc::c_int::try_from(timeout.as_millis().max(1)).unwrap_or(libc::c_int::MAX);
    // SAFETY: one valid pollfd; EINTR or a timeout just returns to the caller's loop.
    unsafe { libc::poll(&mut pfd, 1, ms) };
}

/// A sandboxed process that was started and not yet waited for. Dropping it without
/// [`Sandboxed::wait`] kills and reaps it (an error elsewhere never leaves it running).
pub(crate) struct Sandboxed {
    pid: libc::pid_t,
    exit_fd: Option<OwnedFd>,
    out: Option<std::thread::JoinHandle<Vec<u8>>>,
    err: Option<std::thread::JoinHandle<Vec<u8>>>,
    start: Instant,
    timeout: Duration,
    reaped: bool,
}

impl Drop for Sandboxed {
    fn drop(&mut self) {
        if !self.reaped {
            let mut status = 0;
            // Through the pidfd when there is one: it names this very process, even if its pid
            // had been reused.
            match &self.exit_fd {
                // SAFETY: pidfd_send_signal on our live pidfd, no siginfo, no flags.
                Some(fd) => unsafe {
                    libc::syscall(
                        libc::SYS_pidfd_send_signal,
                        fd.as_raw_fd(),
                        libc::SIGKILL,
                        std::ptr::null::<libc::siginfo_t>(),
                        0u32,
                    );
                },
                // SAFETY: kill our own child, not reaped yet, so its pid is still its own.
                None => unsafe {
                    libc::kill(self.pid, libc::SIGKILL);
                },
            }
            // SAFETY: reap our own child; the grandchild dies with it (PDEATHSIG).
            unsafe { libc::waitpid(self.pid, &mut status, 0) };
        }
    }
}

impl Sandboxed {
    /// The just-forked `pid`, with the threads draining its stdout and stderr.
    pub(super) fn started(
        pid: libc::pid_t,
        out: std::thread::JoinHandle<Vec<u8>>,
        err: std::thread::JoinHandle<Vec<u8>>,
        timeout: Duration,
    ) -> Self {
        Sandboxed {
            pid,
            // Woken the moment the child exits through a pidfd (Linux >= 5.3).
            exit_fd: pidfd_open(pid),
            out: Some(out),
            err: Some(err),
            start: Instant::now(),
            timeout,
            reaped: false,
        }
    }

    /// The outer process's pid.
    pub(crate) fn pid(&self) -> libc::pid_t {
        self.pid
    }

    /// Waits for the process (killing it after the timeout); `Err` names how it failed, with its
    /// output.
    pub(crate) fn wait(mut self) -> Result<(), SandboxError> {
        let status = self.reap()?;
        let stdout = self
            .out
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        let stderr = self
            .err
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
            if !stderr.is_empty() {
                tracing::debug!(stderr = %String::from_utf8_lossy(&stderr), "ldconfig warnings");
            }
            return Ok(());
        }
        let how = if libc::WIFEXITED(status) {
            format!("exit status: {}", libc::WEXITSTATUS(status))
        } else {
            format!("killed by signal {}", libc::WTERMSIG(status))
        };
        Err(SandboxError::Failed {
            how,
            stderr: String::from_utf8_lossy(&stderr).trim().to_string(),
            stdout: String::from_utf8_lossy(&stdout).trim().to_string(),
        })
    }

    /// The wait status; without a pidfd, polls often at first, then backs off to 10 ms.
    fn reap(&mut self) -> Result<libc::c_int, SandboxError> {
        let (pid, start, timeout) = (self.pid, self.start, self.timeout);
        let mut backoff = Duration::from_micros(100);
        let status = loop {
            let mut status = 0;
            // SAFETY: waitpid on our own child with a valid out pointer.
            let rc = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            if rc == pid {
                break status;
            }
            if rc < 0 {
                let e = std::io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                // ECHILD: reaped elsewhere (SIGCHLD ignored); nothing left to kill or reap.
                self.reaped = e.raw_os_error() == Some(libc::ECHILD);
                return Err(SandboxError::Wait { error: e });
            }
            let elapsed = start.elapsed();
            if elapsed > timeout {
                // SAFETY: kill and reap our own child; the grandchild dies with it (PDEATHSIG).
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                    libc::waitpid(pid, &mut status, 0);
                }
                self.reaped = true;
                return Err(SandboxError::TimedOut { timeout });
            }
            match &self.exit_fd {
                Some(fd) => wait_readable(fd, timeout - elapsed),
                None => {
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(Duration::from_millis(10));
                }
            }
        };
        self.reaped = true;
        tracing::debug!(
            elapsed_us = u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX),
            "sandboxed process exited"
        );
        Ok(status)
    }
}
