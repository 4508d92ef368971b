//! Support for gpuhook's end-to-end tests.
//!
//! End-to-end tests drive the real consumers (runc, podman, containerd) as root. On a developer
//! box without root or without those tools they skip with a message; in CI (`GPUHOOK_REQUIRE_E2E=1`,
//! set by `.ci/run`) a skip is a failure, so CI can never go green without running them.

use std::path::{Path, PathBuf};
use std::process::Command;

pub mod containerd;
pub mod help_walk;
pub mod mps;

/// Directory that holds the workspace's built binaries and cdylibs (`target/<profile>`).
///
/// Integration tests run from `target/<profile>/deps/<test>-<hash>`, so it is the parent of the
/// test executable's directory. `GPUHOOK_BIN_DIR` overrides it.
pub fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("GPUHOOK_BIN_DIR") {
        return PathBuf::from(dir);
    }
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("test executable has a parent dir");
    if deps.file_name().is_some_and(|n| n == "deps") {
        deps.parent().expect("deps has a parent").to_path_buf()
    } else {
        deps.to_path_buf()
    }
}

/// Path of a workspace binary (or cdylib file name), failing with a hint when it was not built.
pub fn built(name: &str) -> PathBuf {
    let path = bin_dir().join(name);
    assert!(
        path.exists(),
        "{} is missing: build the workspace first (`cargo build --workspace`), as tests/run-all.sh does",
        path.display()
    );
    path
}

/// Path of the mock NVML cdylib.
pub fn mock_nvml_lib() -> PathBuf {
    built("libgpuhook_mock_nvml.so")
}

/// Root of the workspace checkout.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// True when `GPUHOOK_REQUIRE_E2E=1`: end-to-end tests must run, a skip is a failure.
pub fn e2e_required() -> bool {
    std::env::var("GPUHOOK_REQUIRE_E2E").is_ok_and(|v| v == "1")
}

/// Checks the preconditions of an end-to-end test: running as root and every tool in `tools`
/// found on PATH. Returns `false` (the test should return early) when one is missing and e2e is
/// not required; panics when it is required.
#[must_use]
pub fn e2e_ready(test: &str, tools: &[&str]) -> bool {
    let mut missing = Vec::new();
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        missing.push("root".to_string());
    }
    for tool in tools {
        if which(tool).is_none() {
            missing.push(format!("`{tool}` on PATH"));
        }
    }
    if missing.is_empty() {
        return true;
    }
    let msg = format!("end-to-end test {test} needs {}", missing.join(", "));
    if e2e_required() {
        panic!("{msg}, and GPUHOOK_REQUIRE_E2E=1 forbids skipping (install them as .ci/run does)");
    }
    eprintln!("SKIP: {msg}");
    false
}

/// Finds an executable on PATH.
pub fn which(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

/// Runs a command, panicking with its stdout/stderr when it fails. Returns stdout.
pub fn run_ok(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{cmd:?} failed with {}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Makes a minimal busybox root filesystem in `dir` (static busybox + applet links, `/etc`,
/// `/tmp`, `/proc`, `/dev`, `/sys`). With `debian = true` it also writes `/etc/debian_version`.
pub fn busybox_rootfs(dir: &Path, debian: bool) -> PathBuf {
    let busybox = ["/bin/busybox", "/usr/bin/busybox"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .expect("static busybox (apt-get install busybox-static)");
    for sub in [
        "bin", "etc", "tmp", "proc", "dev", "sys", "usr/bin", "usr/lib", "lib", "var/run",
    ] {
        std::fs::create_dir_all(dir.join(sub)).expect("mkdir rootfs dir");
    }
    std::fs::copy(&busybox, dir.join("bin/busybox")).expect("copy busybox");
    // Ask the host's busybox, not the fresh copy: executing a file this process just wrote races
    // with other test threads forking (ETXTBSY while they still hold the write fd).
    let out = run_ok(Command::new(&busybox).arg("--list"));
    for applet in out.lines().filter(|l| !l.is_empty() && *l != "busybox") {
        let link = dir.join("bin").join(applet);
        if !link.exists() {
            std::os::unix::fs::symlink("busybox", &link).expect("applet link");
        }
    }
    std::fs::write(dir.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n").expect("passwd");
    std::fs::write(dir.join("etc/group"), "root:x:0:\n").expect("group");
    if debian {
        std::fs::write(dir.join("etc/debian_version"), "12.0\n").expect("debian_version");
    }
    dir.to_path_buf()
}
