//! A private dockerd for end-to-end tests: its own config file, data root, exec root, socket and
//! pidfile in a temp dir, no iptables and no bridge, an environment the test chooses (dockerd's
//! `PATH` is where `--gpus` finds `nvidia-container-runtime-hook`; its environment is the hook's,
//! so `GPUHOOK_CONFIG` reaches the hook), and killed on every path (the guard's `Drop`: dockerd,
//! then its managed containerd and any shim left, found by the temp dir in their command line,
//! then the mounts under the dir).
//!
//! The machine's own Docker is never touched: `--config-file` replaces `/etc/docker/daemon.json`,
//! `deprecated-key-path` moves 20.10's `/etc/docker/key.json` into the temp dir, and the socket,
//! pidfile, data and exec roots are private. The one host path dockerd 20.10 always creates is
//! the empty `/run/docker/plugins` (moby `daemon/daemon_linux.go` `getPluginExecRoot`); the last
//! guard removes it (and `/run/docker`) when they did not exist before and are still empty.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Live guards, and whether `/run/docker` existed before the first one.
static LIVE: AtomicUsize = AtomicUsize::new(0);
static RUN_DOCKER_EXISTED: AtomicBool = AtomicBool::new(true);

/// The Docker CLI: Debian's (20.10, the daemon's own version) when installed.
pub fn docker_cli() -> PathBuf {
    ["/usr/bin/docker"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .or_else(|| gpuhook_e2e::which("docker"))
        .expect("docker CLI")
}

/// A running private dockerd.
pub struct Dockerd {
    child: Option<Child>,
    pub dir: PathBuf,
    pub socket: PathBuf,
    pub log: PathBuf,
    pub storage_driver: &'static str,
}

impl Dockerd {
    /// Starts dockerd with `daemon.json` (written to `dir`, `deprecated-key-path` added), `path`
    /// as its `PATH` and `env`; overlay2 when it works here, else vfs. Waits until the API
    /// answers (a readiness wait, not a timing assertion).
    pub fn start(
        dir: &Path,
        daemon_json: &serde_json::Value,
        path: &str,
        env: &[(&str, &Path)],
    ) -> Dockerd {
        let mut json = daemon_json.clone();
        json["deprecated-key-path"] = serde_json::json!(dir.join("key.json"));
        let config = dir.join("daemon.json");
        if !config.exists() {
            std::fs::write(&config, serde_json::to_vec_pretty(&json).unwrap()).unwrap();
        }
        let mut last = String::new();
        for driver in ["overlay2", "vfs"] {
            // Counted from here: every guard, the failed attempt's too, is dropped once.
            if LIVE.fetch_add(1, Ordering::SeqCst) == 0 {
                RUN_DOCKER_EXISTED.store(Path::new("/run/docker").exists(), Ordering::SeqCst);
            }
            let mut d = Dockerd {
                child: None,
                dir: dir.to_path_buf(),
                socket: dir.join("docker.sock"),
                log: dir.join(format!("dockerd-{driver}.log")),
                storage_driver: driver,
            };
            match d.spawn(&config, path, env) {
                Ok(()) => return d,
                Err(log) => last = log,
            }
            d.stop();
        }
        panic!("dockerd did not start with overlay2 nor vfs:\n{last}");
    }

    fn spawn(&mut self, config: &Path, path: &str, env: &[(&str, &Path)]) -> Result<(), String> {
        let log = std::fs::File::create(&self.log).unwrap();
        let mut cmd = Command::new("dockerd");
        cmd.env_clear()
            .env("PATH", path)
            .arg("--config-file")
            .arg(config)
            .arg("--data-root")
            .arg(self.dir.join("data"))
            .arg("--exec-root")
            .arg(self.dir.join("exec"))
            .arg("-H")
            .arg(format!("unix://{}", self.socket.display()))
            .arg("--pidfile")
            .arg(self.dir.join("docker.pid"))
            .args(["--iptables=false", "--ip6tables=false", "--bridge=none"])
            .args(["--storage-driver", self.storage_driver])
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        for (k, v) in env {
            cmd.env(k, v);
        }
        self.child = Some(cmd.spawn().expect("spawn dockerd"));
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if self.docker(&["version"]).status.success() {
                return Ok(());
            }
            let exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if exited.is_some() || Instant::now() > deadline {
                return Err(self.log_text());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `docker -H unix://SOCKET ARGS...`.
    pub fn docker<S: AsRef<std::ffi::OsStr>>(&self, args: &[S]) -> Output {
        Command::new(docker_cli())
            .arg("-H")
            .arg(format!("unix://{}", self.socket.display()))
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run docker")
    }

    /// Imports `rootfs` as the image `name` (`docker import` of a tar: no registry).
    pub fn import(&self, rootfs: &Path, name: &str) {
        let tar = self.dir.join("rootfs.tar");
        gpuhook_e2e::run_ok(
            Command::new("tar")
                .arg("-C")
                .arg(rootfs)
                .arg("-cf")
                .arg(&tar)
                .arg("."),
        );
        let out = self.docker(&[
            "import".as_ref(),
            tar.as_os_str(),
            std::ffi::OsStr::new(name),
        ]);
        assert!(
            out.status.success(),
            "docker import: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// dockerd (SIGTERM, then SIGKILL), then every process left whose command line names this
    /// dir (its containerd, shims), then the mounts under the dir.
    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            if let Ok(pid) = i32::try_from(child.id()) {
                // SAFETY: signalling our own child, whose pid is not reaped yet.
                unsafe { libc::kill(pid, libc::SIGTERM) };
            }
            let deadline = Instant::now() + Duration::from_secs(20);
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        for pid in processes_naming(&self.dir) {
            // SAFETY: kill has no memory effects; the pid names a process started for this dir.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        for m in gpuhook_e2e::containerd::mounts_under(&self.dir) {
            let Ok(c) = std::ffi::CString::new(m.as_os_str().as_encoded_bytes()) else {
                continue;
            };
            // SAFETY: `c` is a valid NUL-terminated path; umount2 does not retain it.
            unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
        }
    }
}

/// Processes (other than this one) whose command line contains `dir`.
fn processes_naming(dir: &Path) -> Vec<i32> {
    let needle = dir.as_os_str().as_encoded_bytes();
    let me = std::process::id();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| *pid != me)
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.windows(needle.len()).any(|w| w == needle))
        })
        .filter_map(|pid| i32::try_from(pid).ok())
        .collect()
}

impl Drop for Dockerd {
    fn drop(&mut self) {
        self.stop();
        if LIVE.fetch_sub(1, Ordering::SeqCst) == 1 && !RUN_DOCKER_EXISTED.load(Ordering::SeqCst) {
            let _ = std::fs::remove_dir("/run/docker/plugins");
            let _ = std::fs::remove_dir("/run/docker");
        }
    }
}
