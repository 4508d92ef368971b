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

mod process;

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

    /// pid 1 of the new pid namespace: confine and exec.
    fn grandchild(&self) -> ! {
        let l = self.limits;
        // SAFETY: only async-signal-safe syscalls; every pointer comes from the prepared plan.
        unsafe {
            check(
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL),
                b"prctl(PDEATHSIG)",
            );
            check(
                libc::mount(
                    std::ptr::null(),
                    c"/".as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                ),
                b"make mounts private",
            );
            // The root fd belongs to the *old* mount namespace: mounting below it would fail
            // (EINVAL). Reach the rootfs by its trusted host path in the new namespace and check
            // it is the very directory the fd refers to.
            check(libc::chdir(self.root_path.as_ptr()), b"chdir(rootfs)");
            let mut st: libc::stat = std::mem::zeroed();
            check(libc::stat(c".".as_ptr(), &mut st), b"stat(rootfs)");
            if st.st_dev != self.root_dev || st.st_ino != self.root_ino {
                fail(b"rootfs path no longer refers to the opened root");
            }
            self.pivot_into_cwd();
            for dir in self.masks {
                let mut st: libc::stat = std::mem::zeroed();
                let p = dir.as_ptr().cast();
                if libc::lstat(p, &mut st) == 0 && st.st_mode & libc::S_IFMT == libc::S_IFDIR {
                    check(
                        libc::mount(
                            self.tmpfs.as_ptr().cast(),
                            p,
                            self.tmpfs.as_ptr().cast(),
                            libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                            c"mode=0555".as_ptr().cast(),
                        ),
                        b"mount read-only tmpfs",
                    );
                }
            }
            let lim = |res, v: u64| {
                let r = libc::rlimit {
                    rlim_cur: v,
                    rlim_max: v,
                };
                check(libc::setrlimit(res, &r), b"setrlimit");
            };
            lim(libc::RLIMIT_CPU, l.cpu_seconds);
            lim(libc::RLIMIT_AS, 1 << 30);
            lim(libc::RLIMIT_NOFILE, 1024);
            lim(libc::RLIMIT_FSIZE, 256 << 20);
            lim(libc::RLIMIT_CORE, 0);
            check(
                libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0),
                b"no_new_privs",
            );
            for cap in 0..=self.last_cap {
                libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0);
            }
            libc::prctl(
                libc::PR_CAP_AMBIENT,
                libc::PR_CAP_AMBIENT_CLEAR_ALL,
                0,
                0,
                0,
            );
            // uid 0 gets no capabilities back at exec, whatever the file says (needs
            // CAP_SETPCAP, so before the capabilities go).
            check(
                libc::prctl(
                    libc::PR_SET_SECUREBITS,
                    SECBIT_NOROOT | SECBIT_NOROOT_LOCKED,
                    0,
                    0,
                    0,
                ),
                b"securebits(NOROOT)",
            );
            check(libc::setgroups(0, std::ptr::null()), b"setgroups");
            check(libc::setresgid(l.gid, l.gid, l.gid), b"setresgid");
            check(libc::setresuid(l.uid, l.uid, l.uid), b"setresuid");
            // Drop every capability (matters when the container user is root).
            let header = [0x2008_0522u32, 0u32];
            let data = [0u32; 6];
            check(
                libc::syscall(libc::SYS_capset, header.as_ptr(), data.as_ptr()) as libc::c_int,
                b"capset",
            );
            // No descriptor of ours (the root fd, other threads' non-CLOEXEC fds) survives exec.
            check(
                libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 4u32) as libc::c_int,
                b"close_range(CLOEXEC)",
            );
            // Best effort: without it ldconfig merely fsyncs its cache.
            if let Some(filter) = &self.no_sync {
                filter.install();
            }
            libc::syscall(
                libc::SYS_execveat,
                self.exe_fd,
                c"".as_ptr(),
                self.argv.as_ptr(),
                self.envp.as_ptr(),
                libc::AT_EMPTY_PATH,
            );
            fail(b"execveat(host ldconfig)")
        }
    }
}

impl Plan {
    /// Makes the current directory (the rootfs, checked) the root of the mount namespace:
    /// bind-mounted onto itself with its submounts (pivot_root needs a mount point; the driver
    /// libraries mounted below it must stay visible), `pivot_root(".", ".")`, then the old root,
    /// stacked on top, detached. Unlike chroot, nothing of the host's tree stays reachable.
    ///
    /// Runs in the forked grandchild, with CAP_SYS_ADMIN, before the capabilities are dropped.
    fn pivot_into_cwd(&self) {
        // SAFETY: only async-signal-safe syscalls on NUL-terminated static strings and the
        // prepared plan; `st` is a valid out pointer.
        unsafe {
            check(
                libc::mount(
                    c".".as_ptr(),
                    c".".as_ptr(),
                    std::ptr::null(),
                    libc::MS_BIND | libc::MS_REC,
                    std::ptr::null(),
                ),
                b"bind-mount the rootfs onto itself",
            );
            // Enter the new mount (the cwd still refers to the one below it) and check it is still
            // the directory the root fd refers to.
            check(libc::chdir(self.root_path.as_ptr()), b"chdir(rootfs mount)");
            let mut st: libc::stat = std::mem::zeroed();
            check(libc::stat(c".".as_ptr(), &mut st), b"stat(rootfs mount)");
            if st.st_dev != self.root_dev || st.st_ino != self.root_ino {
                fail(b"rootfs path no longer refers to the opened root");
            }
            check(
                libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) as libc::c_int,
                b"pivot_root",
            );
            check(
                libc::umount2(c".".as_ptr(), libc::MNT_DETACH),
                b"detach the old root",
            );
            check(libc::chdir(c"/".as_ptr()), b"chdir(/)");
        }
    }
}

/// `SECBIT_NOROOT` and its lock from `<linux/securebits.h>`.
const SECBIT_NOROOT: libc::c_ulong = 1 << 0;
const SECBIT_NOROOT_LOCKED: libc::c_ulong = 1 << 1;

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
) -> Result<Sandboxed, String> {
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
        return Err(format!("fstat root: {}", std::io::Error::last_os_error()));
    }
    let root_path = CString::new(root_path.as_os_str().as_encoded_bytes())
        .map_err(|_| "rootfs path contains NUL".to_string())?;
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
    let (out_r, out_w) = pipe().map_err(|e| format!("pipe: {e}"))?;
    let (err_r, err_w) = pipe().map_err(|e| format!("pipe: {e}"))?;
    let devnull = File::open("/dev/null").map_err(|e| format!("open /dev/null: {e}"))?;
    // SAFETY: the child only performs async-signal-safe syscalls on data prepared above (see
    // `Plan`) and never returns: it execs ldconfig or _exits. We do not use `Command` because its
    // spawn() blocks until the child execs, and our intermediate never does (it waits for the
    // grandchild), which would defeat the timeout.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("fork: {}", std::io::Error::last_os_error()));
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
