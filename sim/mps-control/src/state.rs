//! The daemon's model of MPS servers and clients, with NVIDIA's scheduling rules:
//!
//! * one server at a time (the daemon is not in multi-user mode): a client whose uid has
//!   a running server joins it; with no server, one is started for the client's uid; with
//!   a server of another uid, the client waits in a FIFO queue and that server is asked to
//!   shut down once its last client has gone, after which the next server starts;
//! * a server copies the daemon defaults (`set_default_*`) when it starts, so a default
//!   changes only servers started afterwards; a client copies its server's settings when it
//!   connects (`set_active_thread_percentage`, `set_device_pinned_mem_limit`), so per-server
//!   changes reach only clients connecting afterwards;
//! * a client's effective limits are the minimum of its server's and what it asked for in
//!   `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` / `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`.
//!
//! Servers are real child processes (the simulator's `--sim-server` mode, argv[0]
//! `nvidia-cuda-mps-server`) so their pids exist in /proc; they exit when their stdin (a pipe
//! from the daemon) closes, so they never outlive the daemon.

use crate::error::CommandError;
use crate::limits::{effective_pinned, format_percentage, format_pinned, Devices, PinnedLimits};
use crate::log::LogFile;
use std::collections::{BTreeMap, VecDeque};
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

/// One MPS server process.
#[derive(Debug)]
pub struct Server {
    pub pid: u32,
    pub uid: u32,
    pub child: Child,
    pub active_thread_percentage: f64,
    pub pinned: PinnedLimits,
    pub clients: Vec<u32>,
    /// Asked to exit once its clients are done (a client of another uid is waiting).
    pub shutting_down: bool,
}

/// What a client asked for when it connected.
#[derive(Debug, Clone, Default)]
pub struct Request {
    pub pid: u32,
    pub uid: u32,
    /// The client's own uid and gid when it is not root (`SO_PEERCRED`): its server runs as
    /// that user, like the real one (`setuid` before `exec` of `nvidia-cuda-mps-server`). A
    /// root client naming a uid gets a server that only records it.
    pub run_as: Option<(u32, u32)>,
    pub active_thread_percentage: Option<f64>,
    pub pinned: PinnedLimits,
}

/// A client attached to a server.
#[derive(Debug)]
pub struct Client {
    pub req: Request,
    pub server: u32,
    pub active_thread_percentage: f64,
    pub pinned: PinnedLimits,
    pub stream: UnixStream,
}

impl Client {
    pub fn limits_line(&self) -> String {
        format!(
            "active_thread_percentage={} pinned_mem_limit={}",
            format_percentage(self.active_thread_percentage),
            format_pinned(&self.pinned)
        )
    }
}

/// All mutable daemon state, behind one mutex.
#[derive(Debug)]
pub struct State {
    pub pid: u32,
    pub devices: Devices,
    pub default_atp: f64,
    pub default_pinned: PinnedLimits,
    pub default_priority: u8,
    pub servers: BTreeMap<u32, Server>,
    pub clients: BTreeMap<u32, Client>,
    pub pending: VecDeque<(Request, UnixStream)>,
    pub control_log: Arc<LogFile>,
    pub server_log: Arc<LogFile>,
    pub exe: PathBuf,
    pub log_dir: PathBuf,
    pub pipe_dir: PathBuf,
    pub wedged: bool,
    pub commands_answered: u64,
    /// Set by `quit -t`: refuse new clients, exit when the last client is gone or at the deadline.
    pub quit_deadline: Option<std::time::Instant>,
    pub fault: crate::config::Fault,
}

pub fn send(stream: &UnixStream, line: &str) {
    let mut s = stream;
    let _ = s.write_all(format!("{line}\n").as_bytes());
}

impl State {
    pub fn log(&self, msg: &str) {
        self.control_log.line(self.pid, msg);
    }

    /// Starts a server process for `uid` with the current defaults, as `run_as` when given and
    /// the daemon is root; the server must reach the control socket as that user.
    pub fn start_server(
        &mut self,
        uid: u32,
        run_as: Option<(u32, u32)>,
    ) -> Result<u32, CommandError> {
        let mut cmd = Command::new(&self.exe);
        cmd.arg0("nvidia-cuda-mps-server")
            .args(["--sim-server", "--uid", &uid.to_string()])
            .env("CUDA_MPS_LOG_DIRECTORY", &self.log_dir)
            .env("CUDA_MPS_PIPE_DIRECTORY", &self.pipe_dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        // SAFETY: geteuid has no preconditions and cannot fail.
        if let (Some((u, g)), 0) = (run_as, unsafe { libc::geteuid() }) {
            cmd.uid(u).gid(g);
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| CommandError::StartServer(e.to_string()))?;
        let pid = child.id();
        if let Err(why) = crate::client::server_started(&mut child) {
            self.server_log.line(pid, "MPS server failed to start");
            let _ = child.kill();
            let _ = child.wait();
            return Err(CommandError::StartServer(format!("user {uid}: {why}")));
        }
        self.control_log
            .line(pid, &format!("Starting new server {pid} for user {uid}"));
        self.server_log.line(pid, "Startup");
        self.servers.insert(
            pid,
            Server {
                pid,
                uid,
                child,
                active_thread_percentage: self.default_atp,
                pinned: self.default_pinned.clone(),
                clients: Vec::new(),
                shutting_down: false,
            },
        );
        self.log(&format!("NEW SERVER {pid}: Ready"));
        Ok(pid)
    }

    fn attach(&mut self, req: Request, stream: UnixStream, server_pid: u32) {
        let Some(server) = self.servers.get_mut(&server_pid) else {
            return;
        };
        let atp = req
            .active_thread_percentage
            .map_or(server.active_thread_percentage, |r| {
                r.min(server.active_thread_percentage)
            });
        let client = Client {
            active_thread_percentage: atp,
            pinned: effective_pinned(&server.pinned, &req.pinned),
            server: server_pid,
            stream,
            req,
        };
        server.clients.push(client.req.pid);
        self.server_log.line(
            server_pid,
            &format!("New client {} connected", client.req.pid),
        );
        send(
            &client.stream,
            &format!("ATTACHED server={server_pid} {}", client.limits_line()),
        );
        self.clients.insert(client.req.pid, client);
    }

    /// A new client (from a `CLIENT` hello).
    /// Returns false when the client was refused (its connection owns no record).
    pub fn client_connect(&mut self, req: Request, stream: UnixStream) -> bool {
        let (pid, uid) = (req.pid, req.uid);
        if self.quit_deadline.is_some() {
            send(&stream, "ERROR the MPS control daemon is shutting down");
            return false;
        }
        if self.clients.contains_key(&pid) || self.pending.iter().any(|(r, _)| r.pid == pid) {
            send(&stream, &format!("ERROR client {pid} is already connected"));
            return false;
        }
        let ready = self
            .servers
            .values()
            .find(|s| s.uid == uid && !s.shutting_down)
            .map(|s| s.pid);
        match ready {
            Some(server) if self.pending.is_empty() => {
                self.log(&format!(
                    "NEW CLIENT {pid} from user {uid}: Server already exists"
                ));
                self.attach(req, stream, server);
            }
            _ => {
                self.log(&format!(
                    "NEW CLIENT {pid} from user {uid}: Server is not ready, push client to pending list"
                ));
                send(&stream, "PENDING");
                self.pending.push_back((req, stream));
                self.schedule();
            }
        }
        true
    }

    /// A client connection closed (the process exited) or was terminated.
    pub fn client_gone(&mut self, pid: u32) {
        if let Some(c) = self.clients.remove(&pid) {
            if let Some(s) = self.servers.get_mut(&c.server) {
                s.clients.retain(|p| *p != pid);
                self.server_log
                    .line(c.server, &format!("Client {pid} disconnected"));
            }
        }
        self.pending.retain(|(r, _)| r.pid != pid);
        self.schedule();
    }

    /// Stops a server process and forgets it.
    pub fn stop_server(&mut self, pid: u32) {
        if let Some(mut s) = self.servers.remove(&pid) {
            // Closing its stdin asks the server to exit; kill it if it does not within 1 s.
            drop(s.child.stdin.take());
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
            while matches!(s.child.try_wait(), Ok(None)) && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            let _ = s.child.kill();
            let status = s.child.wait().ok().and_then(|st| st.code()).unwrap_or(1);
            self.server_log.line(pid, "Server exiting");
            self.log(&format!("Server {pid} exited with status {status}"));
        }
    }

    /// Forgets servers whose process died behind the daemon's back.
    pub fn reap(&mut self) {
        let dead: Vec<(u32, i32)> = self
            .servers
            .values_mut()
            .filter_map(|s| match s.child.try_wait() {
                Ok(Some(st)) => Some((s.pid, st.code().unwrap_or(1))),
                _ => None,
            })
            .collect();
        for (pid, code) in dead {
            self.log(&format!("Server {pid} exited with status {code}"));
            if let Some(s) = self.servers.remove(&pid) {
                for c in s.clients {
                    if let Some(client) = self.clients.remove(&c) {
                        send(&client.stream, "TERMINATE");
                    }
                }
            }
        }
        self.schedule();
    }

    /// Serves the pending queue in FIFO order under the one-server-at-a-time rule.
    pub fn schedule(&mut self) {
        loop {
            let idle: Vec<u32> = self
                .servers
                .values()
                .filter(|s| s.shutting_down && s.clients.is_empty())
                .map(|s| s.pid)
                .collect();
            for pid in idle {
                self.stop_server(pid);
            }
            let Some((req, _)) = self.pending.front() else {
                return;
            };
            let uid = req.uid;
            let ready = self
                .servers
                .values()
                .find(|s| s.uid == uid && !s.shutting_down)
                .map(|s| s.pid);
            if let Some(server) = ready {
                let (req, stream) = self.pending.pop_front().expect("front exists");
                self.attach(req, stream, server);
                continue;
            }
            if self.servers.is_empty() {
                let run_as = req.run_as;
                if let Err(e) = self.start_server(uid, run_as) {
                    self.log(&e.to_string());
                    if let Some((_, stream)) = self.pending.pop_front() {
                        send(&stream, &format!("ERROR {e}"));
                    }
                }
                continue;
            }
            let mut changed = false;
            for s in self.servers.values_mut().filter(|s| !s.shutting_down) {
                s.shutting_down = true;
                changed = true;
            }
            if !changed {
                return;
            }
        }
    }

    /// Terminates every client and server (used by `quit`).
    pub fn shutdown_all(&mut self) {
        for (_, c) in std::mem::take(&mut self.clients) {
            send(&c.stream, "TERMINATE");
        }
        for (_, stream) in std::mem::take(&mut self.pending) {
            send(&stream, "TERMINATE");
        }
        let pids: Vec<u32> = self.servers.keys().copied().collect();
        for pid in pids {
            self.stop_server(pid);
        }
    }
}
