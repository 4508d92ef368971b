//! `gpuhook-runtime`: the runc wrapper containerd's shim runs instead of runc; see
//! [`gpuhook::wrapper`]. Nothing is ever written to stdout (it belongs to runc's caller).
//!
//! `no_main`: containerd runs this binary for every runc command of every container, and most of
//! them only exec runc. Rust's own start-up (the main thread's stack guard, which reads
//! `/proc/self/maps`, and the SIGPIPE and stack-overflow handlers) is skipped: nothing here needs
//! it, and runc gets the signal dispositions the shim gave us, as if the shim had run it.
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
    gpuhook::wrapper::main()
}
