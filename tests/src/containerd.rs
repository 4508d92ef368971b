//! A private containerd for end-to-end tests: its own config (the shipped
//! `containerd/config.toml.example` with root, state and socket moved into a temp dir), its own
//! environment, killed and cleaned up on drop.
//!
//! The environment matters: containerd's runc shim runs the runtime binary (`--runc-binary` or
//! `BinaryName`) with the shim's environment, which is containerd's. That is how a test points
//! `gpuhook-runtime` at its config (`GPUHOOK_CONFIG`); `ctr run --env` reaches the container only.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Replaces the example config's root, state and socket with paths under `dir`.
pub fn localize(text: &str, dir: &Path) -> String {
    let mut text = text.to_string();
    for (from, to, quoted) in [
        (
            "/run/containerd/containerd.sock",
            dir.join("containerd.sock"),
            false,
        ),
        ("\"/var/lib/containerd\"", dir.join("root"), true),
        ("\"/run/containerd\"", dir.join("state"), true),
    ] {
        assert!(text.contains(from), "config has no {from}:\n{text}");
        let to = if quoted {
            format!("\"{}\"", to.display())
        } else {
            to.display().to_string()
        };
        text = text.replace(from, &to);
    }
    text
}

/// The shipped example config, localized to `dir`, with `binary` as the gpuhook runtime.
pub fn example_config(dir: &Path, binary: &Path) -> String {
    let path = crate::workspace_root().join("containerd/config.toml.example");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    localize(&text, dir).replace(
        "/usr/local/bin/gpuhook-runtime",
        binary.to_str().expect("UTF-8"),
    )
}

/// A running private containerd.
#[derive(Debug)]
pub struct Containerd {
    child: Child,
    pub dir: PathBuf,
    pub socket: PathBuf,
    pub log: PathBuf,
}

impl Containerd {
    /// Starts containerd on `config` (whose paths point into `dir`) with extra `env`, and waits
    /// until its API answers (a readiness wait, not a timing assertion).
    pub fn start(dir: &Path, config: &Path, env: &[(&str, OsString)]) -> Containerd {
        let log = dir.join("containerd.log");
        let out = std::fs::File::create(&log).expect("containerd log");
        let mut cmd = Command::new("containerd");
        cmd.arg("--config")
            .arg(config)
            .stdout(out.try_clone().expect("dup log"))
            .stderr(out)
            .stdin(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("spawn containerd");
        let mut d = Containerd {
            child,
            dir: dir.to_path_buf(),
            socket: dir.join("containerd.sock"),
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if d.ctr(&["version"]).status.success() {
                return d;
            }
            if let Ok(Some(status)) = d.child.try_wait() {
                panic!("containerd exited with {status}:\n{}", d.log_text());
            }
            assert!(
                Instant::now() < deadline,
                "containerd did not answer on {}:\n{}",
                d.socket.display(),
                d.log_text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `ctr -a SOCKET ARGS...`.
    pub fn ctr<S: AsRef<std::ffi::OsStr>>(&self, args: &[S]) -> Output {
        Command::new("ctr")
            .arg("-a")
            .arg(&self.socket)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run ctr")
    }

    /// containerd's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// containerd's exit status, once it has exited.
    pub fn try_wait(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().expect("wait for containerd")
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// Mount points at or under `dir`, deepest first (from /proc/self/mountinfo).
pub fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut out: Vec<PathBuf> = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|m| PathBuf::from(m.replace("\\040", " ")))
        .filter(|m| m.starts_with(dir))
        .collect();
    out.sort_by_key(|m| std::cmp::Reverse(m.as_os_str().len()));
    out
}

impl Drop for Containerd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        for m in mounts_under(&self.dir) {
            let Ok(c) = std::ffi::CString::new(m.as_os_str().as_bytes()) else {
                continue;
            };
            // SAFETY: `c` is a valid NUL-terminated path; umount2 does not retain it.
            unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
        }
    }
}
