//! Helpers shared by the root-only integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// These tests need root (mounts, mknod, namespaces, cgroups). Returns false (and says so) if not.
pub fn is_root(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        eprintln!("SKIP {test}: needs root");
    }
    root
}

/// Mount points (from the given mountinfo file) at or below `prefix`.
pub fn mounts_under(mountinfo: &str, prefix: &Path) -> Vec<PathBuf> {
    let text = std::fs::read_to_string(mountinfo).unwrap();
    gpuhook_inject::cgroup::parse_mountinfo(&text)
        .into_iter()
        .map(|m| m.mount_point)
        .filter(|p| p.starts_with(prefix))
        .collect()
}

/// Run `f` on a thread with its own *private* mount namespace, so nothing a test mounts can reach
/// the host even if the test fails half-way. Inside, `/proc/thread-self/mountinfo` is the
/// namespace's table.
pub fn in_private_mount_ns<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: unshare only affects this thread (CLONE_FS unshared together with NEWNS).
            let rc = unsafe { libc::unshare(libc::CLONE_FS | libc::CLONE_NEWNS) };
            assert_eq!(rc, 0, "unshare: {}", std::io::Error::last_os_error());
            // SAFETY: plain mount(2) call with static, NUL-terminated strings.
            let rc = unsafe {
                libc::mount(
                    std::ptr::null(),
                    c"/".as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                )
            };
            assert_eq!(rc, 0, "make / private: {}", std::io::Error::last_os_error());
            f()
        })
        .join()
        .unwrap()
    })
}

/// Sorted listing (recursive, relative paths) of a host directory, to prove it was not touched.
pub fn listing(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    fn walk(base: &Path, d: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(d).unwrap().flatten() {
            let p = e.path();
            out.push(p.strip_prefix(base).unwrap().display().to_string());
            if e.file_type().unwrap().is_dir() {
                walk(base, &p, out);
            }
        }
    }
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// Build a real ELF shared object with the given soname (ldconfig only records real ELF files).
pub fn build_stub_so(out: &Path, soname: &str) {
    let src = out.with_extension("c");
    std::fs::write(&src, "int gpuhook_stub(void) { return 0; }\n").unwrap();
    let st = Command::new("gcc")
        .args(["-shared", "-fPIC", &format!("-Wl,-soname,{soname}"), "-o"])
        .arg(out)
        .arg(&src)
        .status()
        .expect("gcc");
    assert!(st.success());
    std::fs::remove_file(src).unwrap();
}

/// mknod a character device on the host side of a test tree.
pub fn mknod(path: &Path, major: u32, minor: u32) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: valid NUL-terminated path; mknod has no memory preconditions.
    let rc = unsafe {
        libc::mknod(
            c.as_ptr(),
            libc::S_IFCHR | 0o666,
            libc::makedev(major, minor),
        )
    };
    assert_eq!(
        rc,
        0,
        "mknod {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
}

/// A static fake "ldconfig" that records what the sandbox gave it into /sandbox-report.
const FAKE: &str = r#"
#include <stdio.h>
#include <unistd.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <linux/capability.h>
extern char **environ;
int main(int argc, char **argv) {
    FILE *f = fopen("/sandbox-report", "w");
    if (!f) return 3;
    fprintf(f, "pid=%d\nuid=%d\ngid=%d\n", (int)getpid(), (int)getuid(), (int)getgid());
    struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
    struct __user_cap_data_struct c[2];
    syscall(SYS_capget, &h, c);
    fprintf(f, "cap_eff=%x%08x\ncap_prm=%x%08x\n", c[1].effective, c[0].effective,
            c[1].permitted, c[0].permitted);

    for (int i = 0; i < argc; i++) fprintf(f, "arg=%s\n", argv[i]);
    for (char **e = environ; *e; e++) fprintf(f, "env=%s\n", *e);
    DIR *d = opendir("/proc");
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d))) if (de->d_name[0] != '.') n++;
    if (d) closedir(d);
    fprintf(f, "proc_entries=%d\n", n);
    FILE *w = fopen("/proc/x", "w");
    fprintf(f, "proc_writable=%d\n", w != NULL);
    int open_fds = 0;
    for (int fd = 3; fd < 1024; fd++) if (fd != fileno(f) && fcntl(fd, F_GETFD) != -1) open_fds++;
    fprintf(f, "open_fds=%d\n", open_fds);
    /* fsync of a bad descriptor: EBADF normally, 0 under the sandbox's no-fsync filter. */
    fprintf(f, "fsync_badfd=%d\n", fsync(-1));
    fclose(f);
    return 0;
}
"#;

/// Compile the fake with `gcc -static` (a static binary needs nothing from the rootfs).
pub fn build_fake_ldconfig(dir: &Path) -> PathBuf {
    build_static(dir, "fake-ldconfig", FAKE)
}

/// Compile a static program from C source.
pub fn build_static(dir: &Path, name: &str, source: &str) -> PathBuf {
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).unwrap();
    let bin = dir.join(name);
    let st = Command::new("gcc")
        .args(["-static", "-O0", "-o"])
        .arg(&bin)
        .arg(&src)
        .status()
        .unwrap();
    assert!(st.success(), "gcc -static failed");
    bin
}

/// Pids of live processes whose executable is `exe`.
pub fn processes_running(exe: &Path) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|p| p == exe))
        .collect()
}

/// A static helper that waits for one byte on stdin, then opens each argument read-only and
/// prints `<path> <errno>` (0 on success): the device-cgroup probe of testing-notes.md.
pub const OPENER: &str = r#"
#include <stdio.h>
#include <fcntl.h>
#include <errno.h>
#include <unistd.h>
int main(int argc, char **argv) {
    char c;
    if (read(0, &c, 1) != 1) return 2;
    for (int i = 1; i < argc; i++) {
        int fd = open(argv[i], O_RDONLY);
        printf("%s %d\n", argv[i], fd < 0 ? errno : 0);
        if (fd >= 0) close(fd);
    }
    return 0;
}
"#;
