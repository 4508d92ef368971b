//! A seccomp filter for the ldconfig sandbox that turns `fsync`/`fdatasync` into successful
//! no-ops.
//!
//! Why: ldconfig fsyncs the new `ld.so.cache` before renaming it into place. On ext4 that forces a
//! journal commit, which waits for whatever else the node is writing (image layers being
//! unpacked, other containers starting): milliseconds to tens of milliseconds on a container's
//! start path. The durability buys nothing here: the cache lives in a container root that does
//! not outlive a host crash in any useful way (the drop-ins and `config.json` are not fsynced
//! either), and the rename still keeps every reader from seeing half a file.
//!
//! The filter only answers those two syscalls itself (`SECCOMP_RET_ERRNO` with errno 0 makes the
//! syscall return 0 without running it); everything else is allowed, and a syscall of another
//! ABI (the arch check) is allowed unchanged. It is installed after `no_new_privs`, so no
//! privilege is needed, and it stays for the exec'd ldconfig.

/// `BPF_LD | BPF_W | BPF_ABS`, `BPF_JMP | BPF_JEQ | BPF_K`, `BPF_RET | BPF_K`.
const LD_ABS_W: u16 = 0x20;
const JEQ_K: u16 = 0x15;
const RET_K: u16 = 0x06;
/// `offsetof(struct seccomp_data, nr)` and `arch`.
const NR_OFFSET: u32 = 0;
const ARCH_OFFSET: u32 = 4;
const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
/// `SECCOMP_RET_ERRNO | 0`: the syscall returns 0 without being run.
const SECCOMP_RET_SUCCESS: u32 = 0x0005_0000;

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: Option<u32> = Some(0xC000_003E);
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: Option<u32> = Some(0xC000_00B7);
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const AUDIT_ARCH: Option<u32> = None;

/// The syscall numbers the filter compares, as `seccomp_data.nr` holds them (a `u32`): small and
/// non-negative on every architecture, so the conversion is exact.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
const NR_FSYNC: u32 = libc::SYS_fsync as u32;
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
const NR_FDATASYNC: u32 = libc::SYS_fdatasync as u32;

const fn insn(code: u16, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// The filter program, built before fork (installing it only reads it).
pub(crate) struct NoSyncFilter {
    insns: [libc::sock_filter; 7],
}

impl NoSyncFilter {
    /// `None` on an architecture we have no audit-arch value for (no filter: ldconfig fsyncs).
    pub(crate) fn new() -> Option<Self> {
        let arch = AUDIT_ARCH?;
        Some(NoSyncFilter {
            insns: [
                insn(LD_ABS_W, 0, 0, ARCH_OFFSET),
                // Another ABI: allow (jump to 5).
                insn(JEQ_K, 0, 3, arch),
                insn(LD_ABS_W, 0, 0, NR_OFFSET),
                insn(JEQ_K, 2, 0, NR_FSYNC),
                insn(JEQ_K, 1, 0, NR_FDATASYNC),
                insn(RET_K, 0, 0, SECCOMP_RET_ALLOW),
                insn(RET_K, 0, 0, SECCOMP_RET_SUCCESS),
            ],
        })
    }

    /// Installs the filter on the calling thread; returns the raw prctl result (-1 on error).
    /// Async-signal-safe (one syscall): used between fork and exec.
    pub(crate) fn install(&self) -> libc::c_int {
        let prog = libc::sock_fprog {
            // Seven instructions; no allocation or panic here (runs between fork and exec).
            len: u16::try_from(self.insns.len()).unwrap_or(0),
            filter: self.insns.as_ptr() as *mut libc::sock_filter,
        };
        // SAFETY: PR_SET_SECCOMP with a valid sock_fprog whose filter points at `self.insns`,
        // which outlives the call; the kernel copies the program.
        unsafe {
            libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &prog as *const libc::sock_fprog,
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fsync_succeeds_without_running_and_other_syscalls_are_untouched() {
        let Some(filter) = NoSyncFilter::new() else {
            return;
        };
        // In a forked child: the filter cannot be removed once installed.
        // SAFETY: the child only makes raw syscalls and _exits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            // SAFETY: plain syscalls in the child; exit codes report what happened.
            unsafe {
                if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || filter.install() != 0
                {
                    libc::_exit(10);
                }
                // A bad descriptor: without the filter EBADF, with it success.
                if libc::fsync(-1) != 0 || libc::fdatasync(-1) != 0 {
                    libc::_exit(11);
                }
                // Anything else still runs: close(-1) is EBADF.
                if libc::close(-1) != -1 {
                    libc::_exit(12);
                }
                libc::_exit(0);
            }
        }
        let mut status = 0;
        // SAFETY: waiting for our own child with a valid out pointer.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status), "{status:#x}");
        assert_eq!(libc::WEXITSTATUS(status), 0);
    }
}
