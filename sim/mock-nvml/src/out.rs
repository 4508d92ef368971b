//! Helpers shared by the entry points: panic containment and C out-parameters.
//!
//! Every exported function runs its body through [`guard`], so a bug in the mock becomes
//! `NVML_ERROR_UNKNOWN` for the caller instead of unwinding into C (which would abort the process
//! under test). Out-parameters are checked for null *before* anything is written, like NVML does.

use std::ffi::CStr;
use std::os::raw::{c_char, c_uint};
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::ffi::{self, NvmlReturn};

/// Runs an entry point's body, mapping `Err(code)` to `code` and a panic to `NVML_ERROR_UNKNOWN`.
pub fn guard(body: impl FnOnce() -> Result<(), NvmlReturn>) -> NvmlReturn {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => ffi::NVML_SUCCESS,
        Ok(Err(code)) => code,
        Err(_) => ffi::NVML_ERROR_UNKNOWN,
    }
}

/// `NVML_ERROR_INVALID_ARGUMENT` for a null pointer.
pub fn nonnull<T>(ptr: *mut T) -> Result<*mut T, NvmlReturn> {
    if ptr.is_null() {
        Err(ffi::NVML_ERROR_INVALID_ARGUMENT)
    } else {
        Ok(ptr)
    }
}

/// Writes `value` through an out-pointer, failing on null.
///
/// # Safety
/// `ptr` must be null or valid for a write of a `T` (the caller's side of NVML's contract).
pub unsafe fn put<T>(ptr: *mut T, value: T) -> Result<(), NvmlReturn> {
    let ptr = nonnull(ptr)?;
    // SAFETY: non-null, and valid for writes per this function's contract; unaligned writes are
    // tolerated so a sloppy caller does not turn into UB here.
    unsafe { ptr.write_unaligned(value) };
    Ok(())
}

/// Copies `s` plus a NUL into a caller's `char buf[len]`.
///
/// # Safety
/// `buf` must be null or valid for writes of `len` bytes.
pub unsafe fn put_str(buf: *mut c_char, len: c_uint, s: &str) -> Result<(), NvmlReturn> {
    let buf = nonnull(buf)?;
    let bytes = s.as_bytes();
    if (len as usize) < bytes.len() + 1 {
        return Err(ffi::NVML_ERROR_INSUFFICIENT_SIZE);
    }
    // SAFETY: `buf` is valid for `len` >= bytes.len() + 1 bytes per the contract, and cannot
    // overlap our own string.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.cast::<u8>(), bytes.len());
        buf.add(bytes.len()).write(0);
    }
    Ok(())
}

/// Fills a fixed-size C char array (truncating, always NUL-terminated).
pub fn fill_array<const N: usize>(dst: &mut [c_char; N], s: &str) {
    *dst = [0; N];
    for (d, b) in dst.iter_mut().zip(s.bytes().take(N.saturating_sub(1))) {
        *d = c_char::from_ne_bytes([b]);
    }
}

/// Reads a caller's NUL-terminated input string; invalid UTF-8 is `Ok(None)` (matches nothing).
///
/// # Safety
/// `ptr` must be null or point to a NUL-terminated string.
pub unsafe fn input_str<'a>(ptr: *const c_char) -> Result<Option<&'a str>, NvmlReturn> {
    if ptr.is_null() {
        return Err(ffi::NVML_ERROR_INVALID_ARGUMENT);
    }
    // SAFETY: non-null and NUL-terminated per the contract; the caller keeps it alive for the call.
    let s = unsafe { CStr::from_ptr(ptr) };
    Ok(s.to_str().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guard_maps_results_and_panics() {
        assert_eq!(guard(|| Ok(())), ffi::NVML_SUCCESS);
        assert_eq!(
            guard(|| Err(ffi::NVML_ERROR_NOT_FOUND)),
            ffi::NVML_ERROR_NOT_FOUND
        );
        assert_eq!(guard(|| panic!("boom")), ffi::NVML_ERROR_UNKNOWN);
    }

    #[test]
    fn put_str_checks_size() {
        let mut buf = [1 as c_char; 6];
        // SAFETY: buf is valid for 6 bytes.
        let short = unsafe { put_str(buf.as_mut_ptr(), 5, "hello") };
        assert_eq!(short, Err(ffi::NVML_ERROR_INSUFFICIENT_SIZE));
        // SAFETY: buf is valid for 6 bytes.
        let fits = unsafe { put_str(buf.as_mut_ptr(), 6, "hello") };
        assert_eq!(fits, Ok(()));
        assert_eq!(buf.map(|c| c.to_ne_bytes()[0]), *b"hello\0");
        // SAFETY: a null buffer is allowed by the contract.
        let null = unsafe { put_str(std::ptr::null_mut(), 6, "x") };
        assert_eq!(null, Err(ffi::NVML_ERROR_INVALID_ARGUMENT));
    }

    #[test]
    fn fill_array_truncates_and_terminates() {
        let mut a = [7 as c_char; 4];
        fill_array(&mut a, "abcdef");
        assert_eq!(a.map(|c| c.to_ne_bytes()[0]), *b"abc\0");
    }
}
