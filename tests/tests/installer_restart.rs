//! `gpuhook-installer install|uninstall --restart-mode systemd|signal|none` against a simulated
//! host root and a REAL containerd 1.6 serving the host's socket path.
//!
//! Expectations come from NVIDIA's toolkit container (`cmd/nvidia-ctk-installer/container/
//! container.go` `Options.Restart`, `.../runtime/containerd/containerd_linux.go`
//! `SignalContainerd`) and from containerd itself: it does not handle SIGHUP
//! (`cmd/containerd/command/main_unix.go` `handledSignals`), so the signal ends it and its
//! service manager starts it again on the new config. `systemctl` is a stub in the host root
//! (busybox sh) recording its argv: the tests have no systemd, and what matters is that the
//! installer runs `systemctl restart containerd` inside the host root, once per real change,
//! with `SYSTEMD_IGNORE_CHROOT=1` (without it systemctl ignores requests in a chroot: systemd's
//! docs/ENVIRONMENT.md, `running_in_chroot_or_offline` in src/shared/verbs.c).

// Integration tests: a failed unwrap or expect is the test failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cdi_support;
mod installer_support;

use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use cdi_support::{s, texts, tmp};
use gpuhook_e2e::containerd::{localize, Containerd};
use gpuhook_e2e::{built, e2e_ready};
use installer_support::{check_runtime_in_dump, host_root, source_dir, INSTALL_DIR};

/// A simulated node with a recording `systemctl`.
struct Node {
    root: PathBuf,
    tmp: tempfile::TempDir,
}

impl Node {
    fn new(tag: &str) -> Node {
        let tmp = tmp(tag);
        let root = host_root(tmp.path());
        std::fs::create_dir_all(root.join("bin")).unwrap();
        std::fs::copy(gpuhook_e2e::which("busybox").unwrap(), root.join("bin/sh")).unwrap();
        let systemctl = root.join("usr/bin/systemctl");
        std::fs::create_dir_all(systemctl.parent().unwrap()).unwrap();
        // Like the real one: in a chroot it ignores the request unless SYSTEMD_IGNORE_CHROOT=1.
        gpuhook_fs::testing::write_executable(
            &systemctl,
            "#!/bin/sh\n[ \"$SYSTEMD_IGNORE_CHROOT\" = 1 ] || \
             { echo \"Running in chroot, ignoring command '$1'\" >&2; exit 0; }\n\
             echo \"$@\" >> /systemctl.calls\n",
        )
        .unwrap();
        Node { root, tmp }
    }

    /// `gpuhook-installer CMD --host-root ROOT --restart-mode MODE`, which must succeed.
    fn installer(&self, cmd: &str, mode: &str) -> String {
        let mut c = Command::new(built("gpuhook-installer"));
        c.args([cmd, "--host-root", s(&self.root), "--restart-mode", mode]);
        if cmd == "install" {
            c.arg("--source-dir").arg(source_dir());
        }
        let out: Output = c.output().unwrap();
        let (stdout, stderr) = texts(&out);
        assert!(
            out.status.success(),
            "{cmd} --restart-mode {mode} failed ({}):\n{stdout}\n{stderr}",
            out.status
        );
        stdout
    }

    /// The argv lines the stub `systemctl` recorded.
    fn systemctl_calls(&self) -> Vec<String> {
        std::fs::read_to_string(self.root.join("systemctl.calls"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    fn config(&self) -> PathBuf {
        self.root.join("etc/containerd/config.toml")
    }

    /// A real containerd on the node's current config, serving the host's socket path
    /// (`/run/containerd/containerd.sock` in the root); only its state and content stores move
    /// into the root's /run/containerd.
    fn containerd(&self) -> Containerd {
        let dir = self.root.join("run/containerd");
        std::fs::create_dir_all(&dir).unwrap();
        let text = std::fs::read_to_string(self.config()).unwrap();
        let text = localize(&text, &dir).replace("\"/opt/containerd\"", &format!("{:?}", dir));
        let config = self.tmp.path().join("containerd.toml");
        std::fs::write(&config, text).unwrap();
        Containerd::start(&dir, &config, &[])
    }
}

fn ready() -> bool {
    e2e_ready(
        "installer_restart",
        &["containerd", "ctr", "ldd", "busybox"],
    )
}

/// systemd: `systemctl restart containerd` in the host root after install and after uninstall,
/// not after a re-install that changed nothing; and a real containerd started on the installed
/// config loads the gpuhook runtime handler with gpuhook-runtime as its BinaryName.
#[test]
fn systemd_mode_restarts_on_change_and_containerd_loads_the_runtime() {
    if !ready() {
        return;
    }
    let node = Node::new("installer-restart-systemd");
    let original = std::fs::read(node.config()).unwrap();
    node.installer("install", "systemd");
    assert_eq!(node.systemctl_calls(), ["restart containerd"]);
    node.installer("install", "systemd");
    assert_eq!(
        node.systemctl_calls(),
        ["restart containerd"],
        "a re-install that changed nothing must not restart containerd"
    );

    check_runtime_in_dump(&node.config());
    let containerd = node.containerd();
    let log = containerd.log_text();
    let binary = format!("BinaryName:/{INSTALL_DIR}/gpuhook-runtime");
    let loaded = log
        .lines()
        .find(|l| l.contains("Start cri plugin with config"))
        .unwrap_or_else(|| panic!("containerd did not start its CRI plugin:\n{log}"));
    assert!(
        loaded.contains("gpuhook:{Type:io.containerd.runc.v2") && loaded.contains(&binary),
        "the running containerd has no gpuhook runtime with {binary}:\n{loaded}"
    );
    drop(containerd);

    node.installer("uninstall", "systemd");
    assert_eq!(
        node.systemctl_calls(),
        ["restart containerd", "restart containerd"]
    );
    assert_eq!(std::fs::read(node.config()).unwrap(), original);
}

/// none: the exact command is printed and no process is touched (the running containerd keeps
/// its pid and answers); signal: the process serving containerd's socket gets SIGHUP, which
/// ends a real containerd (it does not handle the signal; systemd would start it again).
#[test]
fn none_mode_touches_no_process_and_signal_mode_sighups_containerd() {
    if !ready() {
        return;
    }
    let node = Node::new("installer-restart-signal");
    let mut containerd = node.containerd();
    let pid = containerd.pid();

    let out = node.installer("install", "none");
    assert!(
        out.contains("run `systemctl restart containerd` on the host"),
        "{out}"
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(containerd.try_wait(), None, "none must not end containerd");
    assert_eq!(containerd.pid(), pid);
    assert!(containerd.ctr(&["version"]).status.success());
    assert!(node.systemctl_calls().is_empty());

    let out = node.installer("uninstall", "signal");
    assert!(!out.contains("systemctl restart"), "{out}");
    let status = wait_exit(&mut containerd, Duration::from_secs(10));
    assert_eq!(
        status.signal(),
        Some(libc::SIGHUP),
        "containerd must have been ended by SIGHUP, got {status}:\n{}",
        containerd.log_text()
    );
    assert!(node.systemctl_calls().is_empty());
}

/// signal with nothing serving the socket: a clear error naming the socket and the other
/// modes, after the install itself is complete (the state is saved; uninstall still works).
#[test]
fn signal_mode_without_containerd_fails_clearly() {
    if !ready() {
        return;
    }
    let node = Node::new("installer-restart-nosock");
    let out = Command::new(built("gpuhook-installer"))
        .args(["install", "--host-root", s(&node.root), "--source-dir"])
        .arg(source_dir())
        .output()
        .unwrap();
    let (_, stderr) = texts(&out);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("containerd was not restarted")
            && stderr.contains("/run/containerd/containerd.sock")
            && stderr.contains("--restart-mode"),
        "{stderr}"
    );
    node.installer("uninstall", "none");
    assert!(!node.root.join(INSTALL_DIR).join("gpuhook").exists());
}

fn wait_exit(containerd: &mut Containerd, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = containerd.try_wait() {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "containerd still runs {limit:?} after the signal:\n{}",
            containerd.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
