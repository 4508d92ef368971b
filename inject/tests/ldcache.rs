//! The sandboxed host ldconfig, for real (root): the cache lists the stub library; an image whose
//! /etc points at a host directory cannot make us write there; the sandbox really is one (pid 1,
//! owner of /etc without capabilities, empty env, masked /proc) — checked with a static fake
//! ldconfig.

// A test crate: a failed unwrap is the test failing, with its location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{build_stub_so, is_root, listing};
use gpuhook_inject::ldcache::{update_ldcache_with, LdcacheOptions};
use gpuhook_inject::update_ldcache;

const LIBDIR: &str = "/usr/lib/x86_64-linux-gnu";

fn host_ldconfig() -> PathBuf {
    ["/sbin/ldconfig", "/usr/sbin/ldconfig"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .expect("host ldconfig")
}

fn rootfs_with_stub(base: &Path) -> PathBuf {
    let rootfs = base.join("rootfs");
    let lib = rootfs.join(LIBDIR.trim_start_matches('/'));
    std::fs::create_dir_all(&lib).unwrap();
    std::fs::create_dir_all(rootfs.join("proc")).unwrap();
    build_stub_so(&lib.join("libcuda.so.570.1"), "libcuda.so.1");
    rootfs
}

#[test]
fn host_ldconfig_builds_cache_inside_distroless_rootfs() {
    if !is_root("ldcache") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let rootfs = rootfs_with_stub(tmp.path());
    update_ldcache(&rootfs, &[LIBDIR.into()], &host_ldconfig(), 0, 0).unwrap();
    let out = Command::new(host_ldconfig())
        .arg("-p")
        .arg("-C")
        .arg(rootfs.join("etc/ld.so.cache"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("libcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1"),
        "cache listing: {text}"
    );
    // Distroless: ld.so.conf created; drop-in lists the folder; the SONAME link was made.
    assert_eq!(
        std::fs::read_to_string(rootfs.join("etc/ld.so.conf")).unwrap(),
        "include /etc/ld.so.conf.d/*.conf\n"
    );
    let dropin = std::fs::read_to_string(rootfs.join("etc/ld.so.conf.d/00-gpuhook.conf")).unwrap();
    assert!(dropin.lines().any(|l| l == LIBDIR), "{dropin}");
    let soname = rootfs
        .join(LIBDIR.trim_start_matches('/'))
        .join("libcuda.so.1");
    assert_eq!(
        std::fs::read_link(soname).unwrap(),
        Path::new("libcuda.so.570.1")
    );
}

#[test]
fn etc_symlinked_to_host_dir_writes_nothing_on_host() {
    if !is_root("ldcache etc symlink") {
        return;
    }
    for absolute in [true, false] {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().canonicalize().unwrap();
        let rootfs = rootfs_with_stub(&base);
        let host_etc = base.join("host-etc");
        std::fs::create_dir_all(&host_etc).unwrap();
        std::fs::write(host_etc.join("ld.so.conf"), "# host\n").unwrap();
        if absolute {
            symlink(&host_etc, rootfs.join("etc")).unwrap();
        } else {
            symlink("../host-etc", rootfs.join("etc")).unwrap();
            assert_eq!(rootfs.join("etc").canonicalize().unwrap(), host_etc);
        }
        let res = update_ldcache(&rootfs, &[LIBDIR.into()], &host_ldconfig(), 0, 0);
        eprintln!("absolute={absolute}, dangling in root: {res:?}");
        assert!(
            res.is_err(),
            "the in-root target of /etc does not exist: must fail closed"
        );
        assert_eq!(listing(&host_etc), vec!["ld.so.conf"], "host dir modified");
        // Now let the symlink resolve inside the root: everything lands there, never on the host.
        let in_root = if absolute {
            rootfs.join(host_etc.strip_prefix("/").unwrap())
        } else {
            rootfs.join("host-etc")
        };
        std::fs::create_dir_all(&in_root).unwrap();
        update_ldcache(&rootfs, &[LIBDIR.into()], &host_ldconfig(), 0, 0).unwrap();
        assert!(in_root.join("ld.so.conf.d/00-gpuhook.conf").is_file());
        assert!(in_root.join("ld.so.cache").is_file());
        assert_eq!(listing(&host_etc), vec!["ld.so.conf"], "host dir modified");
        assert_eq!(
            std::fs::read_to_string(host_etc.join("ld.so.conf")).unwrap(),
            "# host\n"
        );
    }
}

#[test]
fn sandbox_is_pid1_owner_of_etc_without_capabilities_empty_env_masked_proc() {
    if !is_root("sandbox") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let rootfs = rootfs_with_stub(tmp.path());
    let fake = common::build_fake_ldconfig(tmp.path());
    // The container runs as 65534; ldconfig runs as the owner of /etc (root, made by us).
    update_ldcache_with(
        &rootfs,
        &[LIBDIR.into()],
        &fake,
        LdcacheOptions::new(65534, 65534),
    )
    .unwrap();
    let report = std::fs::read_to_string(rootfs.join("sandbox-report")).unwrap();
    let lines: Vec<&str> = report.lines().collect();
    assert!(lines.contains(&"pid=1"), "new pid namespace: {report}");
    assert!(
        lines.contains(&"uid=0") && lines.contains(&"gid=0"),
        "the owner of /etc: {report}"
    );
    assert!(
        lines.contains(&"cap_eff=000000000") && lines.contains(&"cap_prm=000000000"),
        "uid 0 without any capability: {report}"
    );
    assert!(
        !report.contains("env="),
        "environment must be empty: {report}"
    );
    assert!(
        lines.contains(&"proc_entries=0"),
        "/proc masked by empty tmpfs: {report}"
    );
    assert!(lines.contains(&"proc_writable=0"), "{report}");
    assert!(
        lines.contains(&"open_fds=0"),
        "no inherited descriptors: {report}"
    );
    assert!(
        lines.contains(&"fsync_badfd=0"),
        "fsync is a no-op under the seccomp filter: {report}"
    );
    let args: Vec<&str> = lines
        .iter()
        .filter_map(|l| l.strip_prefix("arg="))
        .collect();
    assert_eq!(
        args,
        [
            "ldconfig",
            "-f",
            "/etc/ld.so.conf",
            "-C",
            "/etc/ld.so.cache",
            LIBDIR
        ]
    );
}

#[test]
fn dynamic_binaries_and_failures_are_reported() {
    if !is_root("sandbox errors") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let rootfs = rootfs_with_stub(tmp.path());
    let err = update_ldcache(&rootfs, &[LIBDIR.into()], Path::new("/bin/true"), 0, 0).unwrap_err();
    assert!(err.to_string().contains("PT_INTERP"), "{err}");
    // Bad folder: refused before anything is written.
    let err =
        update_ldcache(&rootfs, &["relative/dir".into()], &host_ldconfig(), 0, 0).unwrap_err();
    assert!(err.to_string().contains("absolute"), "{err}");
    assert!(!rootfs.join("etc").exists());
}

#[test]
fn runaway_ldconfig_is_killed_by_timeout_and_cpu_limit() {
    if !is_root("sandbox timeout") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().canonicalize().unwrap();
    let rootfs = rootfs_with_stub(&base);
    let spin = common::build_static(&base, "spin", "int main(void) { for (;;) {} }\n");
    // Wall-clock limit: the sandbox is killed, and with it the pid-1 grandchild (PDEATHSIG).
    let mut opts = LdcacheOptions::new(0, 0);
    opts.timeout = std::time::Duration::from_millis(300);
    let err = update_ldcache_with(&rootfs, &[LIBDIR.into()], &spin, opts).unwrap_err();
    assert!(err.to_string().contains("timed out"), "{err}");
    let mut left = common::processes_running(&spin);
    for _ in 0..100 {
        if left.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        left = common::processes_running(&spin);
    }
    assert!(
        left.is_empty(),
        "sandboxed process survived the kill: {left:?}"
    );
    // CPU limit: RLIMIT_CPU kills it (SIGXCPU/SIGKILL) long before the wall-clock limit.
    let mut opts = LdcacheOptions::new(0, 0);
    opts.cpu_seconds = 1;
    opts.timeout = std::time::Duration::from_secs(120);
    let err = update_ldcache_with(&rootfs, &[LIBDIR.into()], &spin, opts).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("exit status: 152") || msg.contains("exit status: 137"),
        "{msg}"
    );
    assert!(!msg.contains("timed out"), "{msg}");
}

#[test]
fn started_ldconfig_runs_beside_the_caller_and_is_killed_when_dropped() {
    if !is_root("ldcache") {
        return;
    }
    use gpuhook_inject::start_ldcache_update;
    let tmp = tempfile::tempdir().unwrap();
    let rootfs = rootfs_with_stub(tmp.path());
    let opts = LdcacheOptions::new(0, 0);
    let alive = |pid: i32| Path::new(&format!("/proc/{pid}")).exists();
    // Started, then waited for: the same result as update_ldcache, and reaped.
    let pending = start_ldcache_update(&rootfs, &[LIBDIR.into()], &host_ldconfig(), opts).unwrap();
    let pid = pending.pid();
    assert!(
        alive(pid),
        "ldconfig's sandbox runs while the caller goes on"
    );
    pending.wait().unwrap();
    assert!(!alive(pid), "waited for and reaped");
    let out = Command::new(host_ldconfig())
        .args(["-p", "-C"])
        .arg(rootfs.join("etc/ld.so.cache"))
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("libcuda.so.1 "));
    // Started, then dropped (the caller failed meanwhile): killed and reaped, no zombie left.
    let pending = start_ldcache_update(&rootfs, &[LIBDIR.into()], &host_ldconfig(), opts).unwrap();
    let pid = pending.pid();
    drop(pending);
    assert!(!alive(pid), "dropping kills and reaps");
}
