//! `gpuhook-installer install|uninstall --runtime docker --restart-mode signal` against a
//! simulated host root whose `/etc/docker/daemon.json` a REAL private dockerd (Debian's docker.io
//! 20.10, `docker_support`) reads, with its pidfile in the host root.
//!
//! Expectations from Docker's documentation and moby's code: dockerd reloads `runtimes` from
//! daemon.json on SIGHUP without restarting (dockerd reference, "Configuration reload
//! behavior"), so after install `docker info` lists the `gpuhook` runtime with the installed
//! gpuhook-runtime as its path, from the same dockerd process. Its reload replaces the runtimes
//! only when the file has a `runtimes` key (moby `daemon/reload_unix.go` `reloadPlatform`,
//! `conf.IsValueSet("runtimes")`): after an uninstall that restores a daemon.json without one,
//! the same dockerd still lists `gpuhook`, and the installer says to restart it.

// Integration tests: a failed unwrap or expect is the test failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cdi_support;
mod docker_support;
#[allow(dead_code)] // check_runtime_in_dump: containerd tests only
mod installer_support;

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use cdi_support::{s, texts, tmp};
use docker_support::Dockerd;
use gpuhook_e2e::{built, e2e_ready};
use installer_support::{host_root, source_dir, INSTALL_DIR};

fn installer(root: &Path, cmd: &str) -> Output {
    let mut c = Command::new(built("gpuhook-installer"));
    c.args([cmd, "--host-root", s(root), "--restart-mode", "signal"])
        .args(["--docker-pidfile", "/etc/docker/docker.pid"]);
    if cmd == "install" {
        c.args(["--runtime", "docker", "--source-dir"])
            .arg(source_dir());
    }
    c.output().unwrap()
}

fn ok(out: &Output, what: &str) -> String {
    let (stdout, stderr) = texts(out);
    assert!(out.status.success(), "{what} failed:\n{stdout}\n{stderr}");
    stdout
}

/// `docker info`'s runtimes (name -> path), polled until `done` holds (the reload runs after
/// the signal is delivered: a readiness wait, not a timing assertion).
fn runtimes_until(
    docker: &Dockerd,
    done: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = docker.docker(&["info", "--format", "{{json .Runtimes}}"]);
        let (stdout, stderr) = texts(&out);
        assert!(out.status.success(), "docker info: {stderr}");
        let runtimes: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
        if done(&runtimes) || Instant::now() > deadline {
            return runtimes;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn sighup_makes_dockerd_list_the_gpuhook_runtime() {
    if !e2e_ready(
        "installer_docker",
        &["dockerd", "docker", "containerd", "ldd", "busybox"],
    ) {
        return;
    }
    let dir = tmp("installer-docker");
    let root = host_root(dir.path());
    let etc_docker = root.join("etc/docker");
    std::fs::create_dir_all(&etc_docker).unwrap();
    let docker = Dockerd::start(
        &etc_docker,
        &serde_json::json!({"log-level": "info"}),
        "/usr/sbin:/usr/bin:/sbin:/bin",
        &[],
    );
    let original = std::fs::read(etc_docker.join("daemon.json")).unwrap();
    let pid = std::fs::read_to_string(etc_docker.join("docker.pid")).unwrap();
    let before = runtimes_until(&docker, |_| true);
    assert!(before.get("gpuhook").is_none(), "{before}");

    let out = ok(&installer(&root, "install"), "install");
    assert!(!out.contains("systemctl restart"), "{out}");
    let path = format!("/{INSTALL_DIR}/gpuhook-runtime");
    let after = runtimes_until(&docker, |r| r.get("gpuhook").is_some());
    assert_eq!(
        after["gpuhook"]["path"],
        path,
        "dockerd did not reload daemon.json on SIGHUP: {after}\n{}",
        docker.log_text()
    );
    assert!(after.get("runc").is_some(), "{after}");
    assert_eq!(
        std::fs::read_to_string(etc_docker.join("docker.pid")).unwrap(),
        pid,
        "SIGHUP must reload dockerd, not restart it"
    );

    // A second install changes nothing: no signal (dockerd logs each reload).
    let reloads = |log: &str| log.matches("Reloaded configuration").count();
    let count = reloads(&docker.log_text());
    assert!(count >= 1, "no reload logged:\n{}", docker.log_text());
    ok(&installer(&root, "install"), "second install");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(reloads(&docker.log_text()), count, "{}", docker.log_text());

    let out = ok(&installer(&root, "uninstall"), "uninstall");
    assert_eq!(
        std::fs::read(etc_docker.join("daemon.json")).unwrap(),
        original
    );
    assert!(
        out.contains("no \"runtimes\" key") && out.contains("systemctl restart docker"),
        "{out}"
    );
    // moby's reloadPlatform keeps the runtimes when the key is gone: as the warning says.
    let left = runtimes_until(&docker, |_| true);
    assert!(left.get("gpuhook").is_some(), "{left}");
}
