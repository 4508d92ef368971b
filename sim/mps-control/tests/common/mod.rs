//! Test harness: a private pipe/log directory per test, the built simulator binary, and
//! helpers to run client-mode commands and simulated CUDA clients.
// Test support: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_sim-nvidia-cuda-mps-control");
/// Upper bound for waiting on asynchronous effects (a hang guard, not a performance goal).
pub const PATIENCE: Duration = Duration::from_secs(20);

#[derive(Debug)]
pub struct Mps {
    pub dir: tempfile::TempDir,
    pub visible: Option<String>,
    pub fault: Option<String>,
}

impl Mps {
    pub fn new() -> Self {
        Mps {
            dir: tempfile::tempdir().expect("tempdir"),
            visible: Some(
                "GPU-11111111-1111-1111-1111-111111111111,GPU-22222222-2222-2222-2222-222222222222"
                    .into(),
            ),
            fault: None,
        }
    }

    pub fn pipe(&self) -> PathBuf {
        self.dir.path().join("pipe")
    }

    pub fn log(&self) -> PathBuf {
        self.dir.path().join("log")
    }

    pub fn cmd(&self) -> Command {
        let mut c = Command::new(BIN);
        c.env("CUDA_MPS_PIPE_DIRECTORY", self.pipe())
            .env("CUDA_MPS_LOG_DIRECTORY", self.log())
            .env_remove("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")
            .env_remove("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT")
            .env_remove("GPUHOOK_SIM_MPS_FAULT");
        match &self.visible {
            Some(v) => c.env("CUDA_VISIBLE_DEVICES", v),
            None => c.env_remove("CUDA_VISIBLE_DEVICES"),
        };
        if let Some(f) = &self.fault {
            c.env("GPUHOOK_SIM_MPS_FAULT", f);
        }
        c
    }

    /// `nvidia-cuda-mps-control -d`.
    pub fn start(&self) -> Output {
        self.cmd()
            .arg("-d")
            .stdin(Stdio::null())
            .output()
            .expect("run -d")
    }

    pub fn start_ok(&self) {
        let out = self.start();
        assert!(out.status.success(), "-d failed: {out:?}");
    }

    /// Client mode with `input` on stdin.
    pub fn control(&self, input: &str) -> Output {
        let mut child = self
            .cmd()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn client");
        // The client may exit before reading stdin (no daemon): a broken pipe is fine.
        let _ = child.stdin.take().unwrap().write_all(input.as_bytes());
        child.wait_with_output().expect("client output")
    }

    /// Client mode, asserting success; returns stdout.
    pub fn ctl(&self, input: &str) -> String {
        let out = self.control(&format!("{input}\n"));
        assert!(out.status.success(), "{input}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    }

    pub fn daemon_pid(&self) -> Option<i32> {
        std::fs::read_to_string(self.pipe().join("nvidia-cuda-mps-control.pid"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    pub fn control_log(&self) -> String {
        std::fs::read_to_string(self.log().join("control.log")).unwrap_or_default()
    }

    /// A simulated CUDA client with the given request environment.
    pub fn client(&self, uid: u32, env: &[(&str, &str)]) -> SimClient {
        let mut c = self.cmd();
        c.args(["--sim-client", "--uid", &uid.to_string()])
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().expect("spawn sim client");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        SimClient { child, lines: rx }
    }
}

impl Drop for Mps {
    fn drop(&mut self) {
        if let Some(pid) = self.daemon_pid() {
            if pid_alive(pid) {
                // SAFETY: kill(2) with a pid read from our own test daemon's pid file.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
}

#[derive(Debug)]
pub struct SimClient {
    pub child: Child,
    pub lines: Receiver<String>,
}

impl SimClient {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn next_line(&self) -> String {
        self.lines
            .recv_timeout(PATIENCE)
            .expect("sim client printed nothing")
    }

    /// Waits for the `server=...` line (skipping `pending`); returns it.
    pub fn attached(&self) -> String {
        loop {
            let l = self.next_line();
            if l.starts_with("server=") {
                return l;
            }
            assert_eq!(l, "pending");
        }
    }

    pub fn wait_exit(&mut self) -> i32 {
        let start = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st.code().unwrap_or(-1);
            }
            assert!(start.elapsed() < PATIENCE, "sim client did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for SimClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether any thread of process `pid` is still running. Not the leader's state alone: when a
/// multi-threaded daemon exits (`quit` and `sim_crash` end it from a connection thread), its
/// leader shows `Z` in `/proc/PID/stat` as soon as it has exited itself, while the other threads
/// may still be exiting and holding the process's descriptors, the instance lock among them, so
/// a `-d` started then was refused as "already running" on a loaded machine. A thread closes its
/// descriptors before it turns zombie (or is reaped), so once every task is `Z`, `X` or gone, the
/// lock is free.
pub fn pid_alive(pid: i32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.filter_map(Result::ok).any(|task| {
        std::fs::read_to_string(task.path().join("stat"))
            .map(|s| {
                let state = s.rsplit(')').next().unwrap_or("").trim_start();
                !state.starts_with('Z') && !state.starts_with('X')
            })
            .unwrap_or(false)
    })
}

/// Polls `cond` until it holds (hang guard: panics after PATIENCE).
pub fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < PATIENCE, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn exists(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok()
}
