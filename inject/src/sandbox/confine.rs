//! The grandchild's side of the sandbox: pid 1 of the new pid namespace confines itself (root
//! pivoted, masks, rlimits, no privileges) and execs the host binary. Everything here runs
//! between fork and exec, so it makes only async-signal-safe syscalls on the prepared [`Plan`]
//! and reports a failure with [`fail`] (a fixed-buffer write and `_exit`), never a panic.

use super::{check, fail, Plan};

/// `SECBIT_NOROOT` and its lock from `<linux/securebits.h>`.
const SECBIT_NOROOT: libc::c_ulong = 1 << 0;
const SECBIT_NOROOT_LOCKED: libc::c_ulong = 1 << 1;

/// [`check`] for `libc::syscall`, which returns a `c_long`.
fn check_syscall(rc: libc::c_long, step: &[u8]) {
    if rc < 0 {
        fail(step);
    }
}

impl Plan {
    /// pid 1 of the new pid namespace: confine and exec.
    pub(super) fn grandchild(&self) -> ! {
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
        }
        // The root fd belongs to the *old* mount namespace: mounting below it would fail
        // (EINVAL). Reach the rootfs by its trusted host path in the new namespace and check
        // it is the very directory the fd refers to.
        self.enter_rootfs(b"chdir(rootfs)", b"stat(rootfs)");
        self.pivot_into_cwd();
        self.mask_dirs();
        self.set_limits();
        self.drop_privileges();
        // SAFETY: async-signal-safe syscalls on the prepared argv/envp and a live exe fd.
        unsafe {
            // No descriptor of ours (the root fd, other threads' non-CLOEXEC fds) survives exec.
            check_syscall(
                libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 4u32),
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
        }
        fail(b"execveat(host ldconfig)")
    }

    /// `chdir` to the trusted rootfs path and check it is still the directory the root fd
    /// refers to (nothing swapped it since the fd was opened).
    fn enter_rootfs(&self, chdir_step: &[u8], stat_step: &[u8]) {
        // SAFETY: chdir/stat on a NUL-terminated path from the plan; `st` is a valid out pointer.
        unsafe {
            check(libc::chdir(self.root_path.as_ptr()), chdir_step);
            let mut st: libc::stat = std::mem::zeroed();
            check(libc::stat(c".".as_ptr(), &mut st), stat_step);
            if st.st_dev != self.root_dev || st.st_ino != self.root_ino {
                fail(b"rootfs path no longer refers to the opened root");
            }
        }
    }

    /// Read-only empty tmpfs over /proc, /sys and /dev (where the image has them as directories).
    fn mask_dirs(&self) {
        for dir in self.masks {
            // SAFETY: lstat/mount on NUL-terminated static strings; `st` is a valid out pointer.
            unsafe {
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
        }
    }

    /// CPU, address space, descriptors, file size; no core dumps.
    fn set_limits(&self) {
        let lim = |res, v: u64| {
            let r = libc::rlimit {
                rlim_cur: v,
                rlim_max: v,
            };
            // SAFETY: setrlimit with a valid rlimit value.
            check(unsafe { libc::setrlimit(res, &r) }, b"setrlimit");
        };
        lim(libc::RLIMIT_CPU, self.limits.cpu_seconds);
        lim(libc::RLIMIT_AS, 1 << 30);
        lim(libc::RLIMIT_NOFILE, 1024);
        lim(libc::RLIMIT_FSIZE, 256 << 20);
        lim(libc::RLIMIT_CORE, 0);
    }

    /// no_new_privs, no capability in any set (NOROOT securebits locked), the caller's uid/gid.
    fn drop_privileges(&self) {
        let l = self.limits;
        // SAFETY: prctl/setgroups/setres*id/capset with constant arguments or valid arrays.
        unsafe {
            check(
                libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0),
                b"no_new_privs",
            );
            for cap in 0..=self.last_cap {
                libc::prctl(libc::PR_CAPBSET_DROP, libc::c_ulong::from(cap), 0, 0, 0);
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
            check_syscall(
                libc::syscall(libc::SYS_capset, header.as_ptr(), data.as_ptr()),
                b"capset",
            );
        }
    }

    /// Makes the current directory (the rootfs, checked) the root of the mount namespace:
    /// bind-mounted onto itself with its submounts (pivot_root needs a mount point; the driver
    /// libraries mounted below it must stay visible), `pivot_root(".", ".")`, then the old root,
    /// stacked on top, detached. Unlike chroot, nothing of the host's tree stays reachable.
    ///
    /// Runs in the forked grandchild, with CAP_SYS_ADMIN, before the capabilities are dropped.
    fn pivot_into_cwd(&self) {
        // SAFETY: only async-signal-safe syscalls on NUL-terminated static strings.
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
        }
        // Enter the new mount (the cwd still refers to the one below it) and check it is still
        // the directory the root fd refers to.
        self.enter_rootfs(b"chdir(rootfs mount)", b"stat(rootfs mount)");
        // SAFETY: as above.
        unsafe {
            check_syscall(
                libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()),
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
