//! The two connecting roles: the real binary's client mode (commands on stdin, replies on
//! stdout) and the simulator's CUDA-application stand-in (`--sim-client`), which does what the
//! CUDA driver does in an application: read the MPS environment, ask the daemon for a server
//! of its uid, and stay connected while it "runs".

use crate::config::Paths;
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// The real binary's message when no daemon answers on the pipe directory.
pub const NO_DAEMON: &str = "Cannot find MPS control daemon process";

/// Client mode: forwards each stdin line to the daemon, prints each reply.
pub fn ui(paths: &Paths) -> i32 {
    if let Err(e) = paths.check_socket_len() {
        eprintln!("{e}");
        return 1;
    }
    if let Err(e) = crate::config::hold(crate::config::HOLD_COMMANDS_ENV) {
        eprintln!("{}: {e}", crate::config::HOLD_COMMANDS_ENV);
        return 1;
    }
    let Ok(mut stream) = UnixStream::connect(paths.socket()) else {
        eprintln!("{NO_DAEMON}");
        return 1;
    };
    if stream.write_all(b"UI\n").is_err() {
        eprintln!("{NO_DAEMON}");
        return 1;
    }
    let mut reader = BufReader::new(match stream.try_clone() {
        Ok(s) => s,
        Err(_) => return 1,
    });
    let stdout = std::io::stdout();
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let cmd = line.trim();
        if cmd.is_empty() {
            continue;
        }
        if stream.write_all(format!("{cmd}\n").as_bytes()).is_err() {
            eprintln!("Lost connection to the MPS control daemon");
            return 1;
        }
        let mut reply = Vec::new();
        match reader.read_until(0, &mut reply) {
            Ok(_) if reply.last() == Some(&0) => {
                reply.pop();
            }
            _ => {
                eprintln!("Lost connection to the MPS control daemon");
                return 1;
            }
        }
        if !reply.is_empty() {
            let mut out = stdout.lock();
            let _ = out.write_all(&reply);
            let _ = out.write_all(b"\n");
            let _ = out.flush();
        }
        if cmd == "quit" || cmd.starts_with("quit ") {
            break;
        }
    }
    0
}

/// Options of `--sim-client`.
#[derive(Debug, Clone)]
pub struct SimClient {
    pub uid: u32,
    pub pid: u32,
    /// Seconds to stay connected once attached; `None` means until terminated.
    pub hold: Option<f64>,
}

fn env_field(key: &str) -> String {
    std::env::var(key)
        .ok()
        .map(|v| v.trim().replace(['\t', '\n'], " "))
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "-".to_string())
}

/// A client that reaches no control daemon runs without MPS, as CUDA does
/// (`nvidia-cuda-mps-control(1)`: "the program continues to run as it normally would without
/// MPS"), if the GPU's compute mode lets it create its own context: exit 4; else 6.
fn without_mps() -> i32 {
    let registry = std::env::var_os(crate::gpus::REGISTRY_ENV).map(std::path::PathBuf::from);
    let device = crate::context::Device::from_env();
    match crate::context::create(device.as_ref(), registry.as_deref()) {
        Ok(_context) => {
            eprintln!("{NO_DAEMON}: running without MPS");
            4
        }
        Err(why) => {
            eprintln!("{NO_DAEMON}; without MPS: {why}");
            6
        }
    }
}

/// Runs a simulated CUDA client. Exit codes: 0 hold elapsed, 2 terminated by the daemon,
/// 3 lost the daemon, 4 no daemon (a real app would run without MPS), 5 refused, 6 no daemon
/// and the GPU's compute mode refuses a context of its own (`cudaErrorDevicesUnavailable`).
pub fn sim_client(paths: &Paths, opts: &SimClient) -> i32 {
    let Ok(mut stream) = UnixStream::connect(paths.socket()) else {
        return without_mps();
    };
    let hello = format!(
        "CLIENT\t{}\t{}\t{}\t{}\n",
        opts.pid,
        opts.uid,
        env_field("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"),
        env_field("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT")
    );
    if stream.write_all(hello.as_bytes()).is_err() {
        return without_mps();
    }
    let mut reader = BufReader::new(stream);
    let mut deadline: Option<Instant> = None;
    let mut buf = String::new();
    loop {
        if let Some(d) = deadline {
            let left = d.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return 0;
            }
            let _ = reader.get_ref().set_read_timeout(Some(left));
        }
        match reader.read_line(&mut buf) {
            Ok(0) => {
                eprintln!("lost connection to the MPS control daemon");
                return 3;
            }
            Ok(_) if buf.ends_with('\n') => {}
            Ok(_) => continue,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(_) => return 3,
        }
        let line = std::mem::take(&mut buf);
        let line = line.trim_end();
        if let Some(rest) = line.strip_prefix("ATTACHED ") {
            println!("{rest}");
            let _ = std::io::stdout().flush();
            deadline = opts
                .hold
                .map(|h| Instant::now() + Duration::from_secs_f64(h.max(0.0)));
        } else if line == "PENDING" {
            println!("pending");
            let _ = std::io::stdout().flush();
        } else if line == "TERMINATE" {
            eprintln!("terminated by the MPS control daemon");
            return 2;
        } else if let Some(e) = line.strip_prefix("ERROR ") {
            eprintln!("{e}");
            return 5;
        }
    }
}

/// `--sim-server`: a stand-in MPS server process. Like the real one (running as its client's
/// user), it first reaches the control socket in `CUDA_MPS_PIPE_DIRECTORY`: every ancestor must
/// be searchable and the socket writable by that user. Then it creates the device context its
/// clients share, which the GPU's compute mode may refuse (`crate::context`: PROHIBITED, or
/// EXCLUSIVE_PROCESS held by another process); its clients are then refused, never served
/// without limits. It says `ready` (or why not) on stdout, then lives until its stdin (a pipe
/// held by the control daemon) closes.
pub fn sim_server() -> i32 {
    let socket = crate::config::Paths::from_env().socket();
    let reach = std::ffi::CString::new(socket.as_os_str().as_encoded_bytes())
        .map_err(|_| "the pipe directory has a NUL byte".to_string())
        .and_then(|c| {
            // SAFETY: access() reads a NUL-terminated path and touches no memory of ours.
            match unsafe { libc::access(c.as_ptr(), libc::W_OK) } {
                0 => Ok(()),
                _ => Err(format!(
                    "cannot reach {}: {}",
                    socket.display(),
                    std::io::Error::last_os_error()
                )),
            }
        });
    let mut out = std::io::stdout();
    if let Err(why) = reach {
        let _ = writeln!(out, "{why}");
        return 1;
    }
    let registry = std::env::var_os(crate::gpus::REGISTRY_ENV).map(std::path::PathBuf::from);
    let device = crate::context::Device::from_env();
    let _context = match crate::context::create(device.as_ref(), registry.as_deref()) {
        Ok(held) => held,
        Err(why) => {
            let _ = writeln!(out, "{why}");
            return 1;
        }
    };
    let _ = writeln!(out, "ready");
    let _ = out.flush();
    let mut buf = [0u8; 64];
    let mut stdin = std::io::stdin();
    while matches!(stdin.read(&mut buf), Ok(n) if n > 0) {}
    0
}

/// Waits for a server started by the daemon to say `ready` (its first stdout line); `Err` with
/// what it said instead.
pub fn server_started(child: &mut std::process::Child) -> Result<(), String> {
    let Some(out) = child.stdout.take() else {
        return Err("no stdout".into());
    };
    let mut line = String::new();
    let _ = BufReader::new(out.take(4096)).read_line(&mut line);
    match line.trim() {
        "ready" => Ok(()),
        "" => Err("exited before it was ready".into()),
        why => Err(why.to_string()),
    }
}
