//! `gpuhook`: see [`gpuhook::cli`].
//!
//! `no_main`: the prestart hook runs on every container start and `cdi generate` on every spec
//! refresh, and Rust's own start-up took about a twelfth of a refresh: the main thread's stack
//! guard reads `/proc/self/maps`, the stack-overflow handler maps an alternate signal stack.
//! What the commands rely on is done here instead, as Rust's start-up does it: closed standard
//! descriptors are reopened on `/dev/null` (so that a file opened later never becomes stdout or
//! stderr), SIGPIPE is ignored (a closed pipe is an EPIPE error, not a silent death), a panic
//! exits with status 101, stdout is flushed at the end. The one difference: a stack overflow of
//! the main thread is a plain SIGSEGV, without Rust's message.
// Test builds keep the harness's own `main`.
#![cfg_attr(not(test), no_main)]

/// The C entry point; the arguments are read through `std::env::args_os`, which works without
/// Rust's runtime start-up on Linux.
#[cfg(not(test))]
#[no_mangle]
pub extern "C" fn main(
    _argc: std::ffi::c_int,
    _argv: *const *const std::ffi::c_char,
) -> std::ffi::c_int {
    use std::io::Write;
    /// Exit status of a panic, as with Rust's own start-up.
    const PANIC_STATUS: u8 = 101;
    start();
    let status = std::panic::catch_unwind(gpuhook::cli::status).unwrap_or(PANIC_STATUS);
    // Rust's start-up flushes stdout at exit too; a failure there has nowhere to go.
    let _ = std::io::stdout().flush();
    std::ffi::c_int::from(status)
}

/// The part of Rust's start-up the commands rely on.
#[cfg_attr(test, allow(dead_code))]
fn start() {
    reopen_closed_standard_fds();
    // SAFETY: setting a signal's disposition to SIG_IGN runs no code of ours and is done before
    // any thread exists.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
}

/// Opens `/dev/null` on each of fds 0, 1, 2 that is closed (one `poll` finds them); aborts when
/// it cannot, as Rust's start-up does.
fn reopen_closed_standard_fds() {
    let mut fds = [0, 1, 2].map(|fd| libc::pollfd {
        fd,
        events: 0,
        revents: 0,
    });
    // SAFETY: `fds` is an array of 3 initialised pollfd that outlives the call; timeout 0.
    let polled = unsafe { libc::poll(fds.as_mut_ptr(), 3, 0) } != -1;
    for pfd in fds {
        let closed = if polled {
            pfd.revents & libc::POLLNVAL != 0
        } else {
            // SAFETY: F_GETFD only reads the descriptor's flags.
            let flags = unsafe { libc::fcntl(pfd.fd, libc::F_GETFD) };
            flags == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EBADF)
        };
        // SAFETY: a NUL-terminated path and plain flags; the lowest free descriptor is `pfd.fd`
        // (every lower one is open), which is checked.
        if closed && unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) } != pfd.fd {
            std::process::abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_standard_fds_are_left_alone() {
        // The test process has its three standard descriptors: nothing is opened.
        let before = std::fs::read_dir("/proc/self/fd").unwrap().count();
        reopen_closed_standard_fds();
        assert_eq!(std::fs::read_dir("/proc/self/fd").unwrap().count(), before);
    }
}
