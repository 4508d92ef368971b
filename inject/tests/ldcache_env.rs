//! CVE-2025-23266: even with LD_PRELOAD / LD_LIBRARY_PATH in *our* environment, the sandboxed
//! ldconfig gets an empty one. Its own test binary because it sets process-wide env vars.

// A test crate: a failed unwrap is the test failing, with its location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use gpuhook_inject::ldcache::{update_ldcache_with, LdcacheOptions};

#[test]
fn ld_preload_in_our_env_does_not_reach_ldconfig() {
    if !common::is_root("ld_preload") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let rootfs = tmp.path().join("rootfs");
    std::fs::create_dir_all(rootfs.join("usr/lib")).unwrap();
    let fake = common::build_fake_ldconfig(tmp.path());
    // Set after building (gcc would complain about the missing preload object).
    std::env::set_var("LD_PRELOAD", "/proc/self/cwd/poc.so");
    std::env::set_var("LD_LIBRARY_PATH", "/evil");
    let res = update_ldcache_with(
        &rootfs,
        &["/usr/lib".into()],
        &fake,
        LdcacheOptions::new(0, 0),
    );
    std::env::remove_var("LD_PRELOAD");
    std::env::remove_var("LD_LIBRARY_PATH");
    res.unwrap();
    let report = std::fs::read_to_string(rootfs.join("sandbox-report")).unwrap();
    assert!(report.contains("pid=1"), "{report}");
    assert!(!report.contains("env="), "environment leaked: {report}");
}
