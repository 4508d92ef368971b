//! Helpers of the enforcement tests: test cgroups, the env a CDI device gives a client, and
//! the daemon's view of its clients.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::common::*;
use gpu_mps_daemon::gpuhook_cdi::{apply_devices, Registry};
use serde_json::Value;

pub const FAST: &str = "  probeInterval: 200ms\n  commandTimeout: 5s\n  maxRestartBackoff: 1s\n";
pub const SHARES: &str =
    "  shares: [{name: quarter, fraction: 1/4}, {name: half, fraction: 1/2}]\n";

/// A v1 `pids` cgroup; its processes are killed and the directory removed on drop.
pub struct TestCgroup {
    dir: PathBuf,
}

impl TestCgroup {
    pub fn parent() -> Option<PathBuf> {
        let p = Path::new("/sys/fs/cgroup/pids");
        (nix::unistd::geteuid().is_root() && p.join("cgroup.procs").exists())
            .then(|| p.join(format!("gpuhook-test-{}", std::process::id())))
    }

    pub fn new(name: &str) -> TestCgroup {
        let dir = Self::parent().unwrap().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        TestCgroup { dir }
    }

    /// Runs `cmd` inside this cgroup (moved there by a shell before it execs).
    pub fn spawn(&self, program: &Path, args: &[&str], env: &[(String, String)]) -> Child {
        let mut script = format!(
            "echo $$ > '{}/cgroup.procs' && exec '{}'",
            self.dir.display(),
            program.display()
        );
        for a in args {
            script.push_str(&format!(" '{a}'"));
        }
        Command::new("/bin/sh")
            .args(["-c", &script])
            .env_clear()
            .envs(env.iter().cloned())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    }

    pub fn remove(&self) {
        for _ in 0..200 {
            let procs = std::fs::read_to_string(self.dir.join("cgroup.procs")).unwrap_or_default();
            for p in procs.split_whitespace() {
                // SAFETY: kill(2) of a process of our own test cgroup.
                unsafe { libc::kill(p.parse().unwrap_or(0), libc::SIGKILL) };
            }
            if std::fs::remove_dir(&self.dir).is_ok() || !self.dir.exists() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("cannot remove {}", self.dir.display());
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        if self.dir.exists() {
            self.remove();
        }
        if let Some(parent) = self.dir.parent() {
            let _ = std::fs::remove_dir(parent);
        }
    }
}

pub fn cgroups_ready(test: &str) -> bool {
    if TestCgroup::parent().is_some() {
        return true;
    }
    let msg = format!("{test} needs root and the cgroup v1 pids hierarchy");
    assert!(
        std::env::var("GPUHOOK_REQUIRE_E2E").as_deref() != Ok("1"),
        "{msg}"
    );
    eprintln!("SKIP: {msg}");
    false
}

pub fn ctr_id(n: u8) -> String {
    format!("{:02x}", n).repeat(32)
}

/// The env a container of CDI device `name` gets, applied from the daemon's spec file the way a
/// runtime applies it.
pub fn device_env(node: &Node, name: &str) -> Vec<(String, String)> {
    let reg = Registry::load(&[&node.cdi_dir]);
    assert!(reg.errors.is_empty(), "{:?}", reg.errors);
    let mut oci = serde_json::json!({"process": {"env": []}});
    apply_devices(&mut oci, &reg, &[format!("nvidia.com/gpu-mps={name}")]).unwrap();
    oci["process"]["env"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| {
            v.as_str()?
                .split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
        })
        .collect()
}

/// The env with the pipe directory mapped back to the host (these clients run on the host).
pub fn host_env(node: &Node, name: &str, gpu: u32) -> Vec<(String, String)> {
    let mut env = device_env(node, name);
    for (k, v) in &mut env {
        if k == "CUDA_MPS_PIPE_DIRECTORY" {
            *v = node.pipe(gpu).display().to_string();
        }
    }
    env
}

pub fn usage(node: &Node, gpu: u32) -> Value {
    node.gpu_status(gpu)
        .map(|g| g["usage"].clone())
        .unwrap_or(Value::Null)
}

pub fn clients_of(node: &Node, gpu: u32) -> BTreeMap<u64, String> {
    usage(node, gpu)["clients"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|c| {
                    (
                        c["pid"].as_u64().unwrap(),
                        c["container"].as_str().unwrap_or("-").to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

pub fn wait_client(node: &Node, pid: u32, ctr: &str) {
    wait_for(&format!("client {pid} attributed to {ctr}"), || {
        (clients_of(node, 0).get(&u64::from(pid)).map(String::as_str) == Some(ctr)).then_some(())
    });
}

pub fn wait_exit_code(child: &mut Child) -> Option<i32> {
    wait_for("client exit", || {
        child.try_wait().unwrap().map(|s| s.code())
    })
}
