//! The `gpuhook` binary's process start-up (`no_main`, see `src/bin/gpuhook.rs`): what Rust's own
//! start-up guaranteed still holds. Closed standard descriptors are reopened on `/dev/null` before
//! any file is opened, SIGPIPE is ignored, a panic exits with 101.
// An integration-test crate: a failed set-up step is the test's failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Output, Stdio};

fn gpuhook(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gpuhook"));
    cmd.args(args)
        .env_remove("GPUHOOK_CONFIG")
        .env_remove("GPUHOOK_LOG_FORMAT")
        .env_remove("RUST_BACKTRACE");
    cmd
}

/// The write end of a pipe whose read end is already closed: writing to it is EPIPE/SIGPIPE.
fn broken_pipe() -> Stdio {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe(2) writes.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: both descriptors were just created and are owned here alone.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(read);
    Stdio::from(write)
}

fn run(cmd: &mut Command) -> Output {
    cmd.stderr(Stdio::piped()).output().expect("run gpuhook")
}

/// A spec directory with one device, `example.com/gpu=0`.
fn spec_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("example.json"),
        r#"{"cdiVersion":"0.5.0","kind":"example.com/gpu","devices":[{"name":"0","containerEdits":{"deviceNodes":[{"path":"/dev/null"}]}}]}"#,
    )
    .unwrap();
    dir
}

#[test]
fn a_closed_stdout_is_reopened_before_the_log_file_can_take_its_place() {
    // Started with fd 1 closed, the log file opened first would become fd 1 and receive what
    // `cdi list` prints on stdout, unless fd 1 is reopened on /dev/null at start-up.
    let specs = spec_dir();
    let log = specs.path().join("gpuhook.log");
    let mut cmd = gpuhook(&[
        "--log-file",
        log.to_str().unwrap(),
        "cdi",
        "list",
        "--spec-dir",
    ]);
    cmd.arg(specs.path());
    // SAFETY: close(2) is async-signal-safe; the child closes its own stdout before exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::close(1);
            Ok(())
        });
    }
    let out = run(&mut cmd);
    assert!(out.status.success(), "{out:?}");
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        !logged.contains("example.com/gpu=0"),
        "stdout went to the log file: {logged}"
    );
    // The same command with stdout open prints the device (the check above means something).
    let mut cmd = gpuhook(&["cdi", "list", "--spec-dir"]);
    let out = run(cmd.arg(specs.path()));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "example.com/gpu=0\n");
}

#[test]
fn a_closed_pipe_is_an_error_not_a_sigpipe_death() {
    let specs = spec_dir();
    let mut cmd = gpuhook(&["cdi", "list", "--spec-dir"]);
    let out = run(cmd.arg(specs.path()).stdout(broken_pipe()));
    assert_eq!(out.status.signal(), None, "{out:?}");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("gpuhook: error:") && err.contains("Broken pipe"),
        "{err}"
    );
}

#[test]
fn a_panic_exits_with_101() {
    // `println!` panics when stdout is a closed pipe: Rust's start-up turned that into status
    // 101, not an abort.
    let out = run(gpuhook(&["version"]).stdout(broken_pipe()));
    assert_eq!(out.status.signal(), None, "{out:?}");
    assert_eq!(out.status.code(), Some(101), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("failed printing to stdout"), "{err}");
}

#[test]
fn the_unwinder_is_linked_in_not_loaded() {
    // `gpuhook-build` links gcc's static unwinder: a start maps libc and nothing else (no
    // libgcc_s.so.1, whose constructor's cpuid probes cost ~0.1 ms under a hypervisor). The
    // loader's own trace says which objects it loads; `a_panic_exits_with_101` shows that
    // unwinding still works.
    let out = run(gpuhook(&["version"]).env("LD_DEBUG", "files"));
    assert!(out.status.success(), "{out:?}");
    let trace = String::from_utf8_lossy(&out.stderr);
    assert!(trace.contains("file=libc.so.6"), "no loader trace: {trace}");
    assert!(!trace.contains("libgcc_s"), "{trace}");
}
