//! Run a host binary (ldconfig) against a container root, sandboxed.
//!
//! The child must not be trusted with anything: the image controls every file it will read. So
//! the binary is the host's, opened as an fd before anything else and started with execveat (no
//! path in the image is ever executed, no dynamic loader from the image either — the caller checks
//! it is static); it runs in new mount, pid and ipc namespaces with all mounts made private, with
//! the container root pivoted to (`pivot_root` and the old root detached: no path leads back to
//! the host's tree), sees only read-only empty tmpfs over /proc, /sys and /dev, has CPU/memory/file
//! rlimits, no capabilities (bounding, ambient, permitted and effective sets empty, and the
//! `SECBIT_NOROOT` securebits locked so uid 0 regains none at exec), no_new_privs, an *empty*
//! environment (CVE-2025-23266: nothing like LD_PRELOAD can reach it), and a seccomp filter that
//! makes its fsync a no-op (see the `seccomp` module).
//!
//! Its uid and gid are the caller's choice ([`Limits`]): ldconfig runs as the owner of the
//! directory it writes the cache into (see `ldcache`), which is what writing the cache needs and
//! no more; without capabilities, uid 0 can write only where the owner bits let it.
//!
//! Process shape: we fork an intermediate that unshares the namespaces and
//! forks again; the grandchild is pid 1 of the new pid namespace and execs ldconfig. Both set
//! PDEATHSIG=SIGKILL, so killing the intermediate on timeout also kills the grandchild. Only
//! async-signal-safe libc calls run after fork; everything is prepared beforehand.

use std::ffi::CString;
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;
use std::time::Duration;

use crate::seccomp::NoSyncFilter;

mod confine;
mod error;
mod process;

pub(crate) use error::SandboxError;
pub(crate) use process::Sandboxed;

/// Limits for the sandboxed process.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Who it runs as (the owner of the directory it writes; see `ldcache`).
    pub uid: u32,
    pub gid: u32,
    pub cpu_seconds: u64,
    pub timeout: Duration,
}

/// Everything the forked children need, prepared before fork.
struct Plan {
    /// The rootfs path (trusted host path) and the identity of the dir the root fd refers to.
    root_path: CString,
    root_dev: u64,
    root_ino: u64,
    exe_fd: RawFd,
    argv: Vec<*const libc::c_char>,
    envp: [*const libc::c_char; 1],
    masks: [&'static [u8]; 3],
    tmpfs: &'static [u8],
    limits: Limits,
    last_cap: u32,
    /// fsync/fdatasync made no-ops (see the `seccomp` module); `None` where unsupported.
    no_sync: Option<NoSyncFilter>,
}

// SAFETY: the raw pointers point into CStrings owned by `run_sandboxed`'s frame, which outlives
// the child spawn (the closure only runs in the forked child, before `spawn` returns).
unsafe impl Send for Plan {}
// SAFETY: as above; the plan is only read.
unsafe impl Sync for Plan {}

fn fail(step: &[u8]) -> ! {
    // SAFETY: errno location is thread-local and always valid.
    let errno = unsafe { *libc::__errno_location() };
    let mut buf = [0u8; 160];
    let prefix = b"gpuhook ldconfig sandbox: ";
    let mut n = 0;
    for part in [prefix as &[u8], step, b": errno "] {
        let take = part.len().min(buf.len().saturating_sub(n + 12));
        buf[n..n + take].copy_from_slice(&part[..take]);
        n += take;
    }
    let mut digits = [0u8; 10];
    let mut v = errno.unsigned_abs();
    let mut d = 0;
    loop {
        digits[d] = b'0' + (v % 10) as u8;
        d += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    while d > 0 {
        d -= 1;
        buf[n] = digits[d];
        n += 1;
    }
    buf[n] = b'\n';
    // SAFETY: write(2) and _exit(2) are async-signal-safe; `buf` is valid for `n + 1` bytes.
    unsafe {
        libc::write(2, buf.as_ptr().cast(), n + 1);
        libc::_exit(125)
    }
}

fn check(rc: libc::c_int, step: &[u8]) {
    if rc < 0 {
        fail(step);
    }
}

impl Plan {
    /// Runs in the forked child; never returns.
    fn intermediate(&self) -> ! {
        // SAFETY: only async-signal-safe syscalls on values prepared before fork.
        unsafe {
            check(
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL),
                b"prctl(PDEATHSIG)",
            );
            check(
                libc::unshare(libc::CLONE_NEWNS | libc::CLONE_NEWPID | libc::CLONE_NEWIPC),
                b"unshare(mnt|pid|ipc)",
            );
            let pid = libc::fork();
            check(pid, b"fork");
            if pid == 0 {
                self.grandchild();
            }
            let mut status = 0;
            loop {
                if libc::waitpid(pid, &mut status, 0) >= 0 {
                    break;
                }
                if *libc::__errno_location() != libc::EINTR {
                    fail(b"waitpid");
                }
            }
            if libc::WIFEXITED(status) {
                libc::_exit(libc::WEXITSTATUS(status))
            }
            libc::_exit(128 + libc::WTERMSIG(status))
        }
    }
}

fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into a valid 2-element array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors are fresh and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn drain(mut r: impl Read + Send + 'static) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = r.read(&mut buf) {
            if n == 0 {
                break;
            }
            if out.len() < 64 * 1024 {
                out.extend_from_slice(&buf[..n]);
            }
        }
        out
    })
}

/// Starts `exe` (an fd on a host binary) with `args` inside `root`, confined as described in the
/// module docs, and returns at once: the caller can work meanwhile (on things the process does
/// not look at) and then [`Sandboxed::wait`]. Returns the reason on failure.
pub(crate) fn spawn_sandboxed(
    root: BorrowedFd<'_>,
    root_path: &Path,
    exe: &File,
    args: &[CString],
    limits: Limits,
) -> Result<Sandboxed, SandboxError> {
    let last_cap = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(63);
    let mut argv: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    // SAFETY: an all-zero `stat` is a valid value to be overwritten by fstat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `root` is a live fd and `st` a valid out pointer.
    if unsafe { libc::fstat(root.as_raw_fd(), &mut st) } < 0 {
        return Err(SandboxError::setup(
            "fstat root",
            std::io::Error::last_os_error(),
        ));
    }
    let root_path = CString::new(root_path.as_os_str().as_encoded_bytes())
        .map_err(|_| SandboxError::NulInRootPath)?;
    let plan = Plan {
        root_path,
        root_dev: st.st_dev,
        root_ino: st.st_ino,
        exe_fd: exe.as_raw_fd(),
        argv,
        envp: [std::ptr::null()],
        masks: [b"/proc\0", b"/sys\0", b"/dev\0"],
        tmpfs: b"tmpfs\0",
        limits,
        last_cap,
        no_sync: NoSyncFilter::new(),
    };
    let (out_r, out_w) = pipe().map_err(|e| SandboxError::setup("pipe", e))?;
    let (err_r, err_w) = pipe().map_err(|e| SandboxError::setup("pipe", e))?;
    let devnull = File::open("/dev/null").map_err(|e| SandboxError::setup("open /dev/null", e))?;
    // SAFETY: the child only performs async-signal-safe syscalls on data prepared above (see
    // `Plan`) and never returns: it execs ldconfig or _exits. We do not use `Command` because its
    // spawn() blocks until the child execs, and our intermediate never does (it waits for the
    // grandchild), which would defeat the timeout.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(SandboxError::setup("fork", std::io::Error::last_os_error()));
    }
    if pid == 0 {
        // SAFETY: dup2 onto the standard descriptors (async-signal-safe) in the new child.
        unsafe {
            if libc::dup2(devnull.as_raw_fd(), 0) < 0
                || libc::dup2(out_w.as_raw_fd(), 1) < 0
                || libc::dup2(err_w.as_raw_fd(), 2) < 0
            {
                libc::_exit(124);
            }
        }
        plan.intermediate();
    }
    drop((out_w, err_w, devnull));
    Ok(Sandboxed::started(
        pid,
        drain(File::from(out_r)),
        drain(File::from(err_r)),
        limits.timeout,
    ))
}
