//! The control daemon (`-d` / `-f`): single-instance lock, daemonisation, the `control`
//! socket and the per-connection protocol.
//!
//! Start-up order matters for callers that supervise us the way they would supervise the real
//! binary: everything that can fail (socket path length, the `control_lock` flock, a live
//! instance, binding the socket) happens before forking, so a failure is reported by the
//! process that was started; with `-d` the original process exits 0 only after the daemon has
//! written its pid file and is listening.
//!
//! Wire protocol on `<pipe dir>/control` (ours; the real one is private): the first line is a
//! hello, `UI` for `nvidia-cuda-mps-control` client mode or
//! `CLIENT\t<pid>\t<uid>\t<atp or ->\t<pinned or ->` for a simulated CUDA client. A UI then
//! sends one command per line and gets the reply text followed by a NUL byte. A CUDA client
//! receives lines: `PENDING`, `ATTACHED server=<pid> active_thread_percentage=<p>
//! pinned_mem_limit=<l>`, `TERMINATE`, `ERROR <message>`.

use crate::commands::{execute, Action};
use crate::config::{Fault, Paths};
use crate::error::RequestError;
use crate::limits::{parse_percentage, parse_pinned_env, Devices, PinnedLimits};
use crate::log::LogFile;
use crate::state::{Request, State};
use anyhow::{anyhow, Context, Result};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Message of the real binary when a daemon already runs on the pipe directory.
pub const ALREADY_RUNNING: &str = "An instance of this daemon is already running";

type Shared = Arc<Mutex<State>>;

fn lock_instance(paths: &Paths) -> Result<std::fs::File> {
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(paths.lock_file())
        .with_context(|| format!("opening {}", paths.lock_file().display()))?;
    // SAFETY: flock on a valid, owned file descriptor; no memory is involved.
    let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        return Err(anyhow!(ALREADY_RUNNING));
    }
    // Another implementation may not use the lock: a live pid plus a listening socket wins.
    let live = std::fs::read_to_string(paths.pid_file())
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok())
        .is_some_and(|pid| std::path::Path::new(&format!("/proc/{pid}")).exists());
    if live && UnixStream::connect(paths.socket()).is_ok() {
        return Err(anyhow!(ALREADY_RUNNING));
    }
    Ok(f)
}

fn write_pid_file(paths: &Paths) -> Result<()> {
    let tmp = paths.pipe_dir.join(".nvidia-cuda-mps-control.pid.tmp");
    std::fs::write(&tmp, format!("{}\n", std::process::id()))
        .with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, paths.pid_file())
        .with_context(|| format!("renaming to {}", paths.pid_file().display()))
}

/// Runs the daemon; returns the process exit code for the process that was started.
pub fn run(paths: &Paths, background: bool) -> Result<i32> {
    let fault = Fault::parse(std::env::var("GPUHOOK_SIM_MPS_FAULT").ok().as_deref())?;
    paths.check_socket_len()?;
    for d in [&paths.pipe_dir, &paths.log_dir] {
        std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    }
    let lock = lock_instance(paths)?;
    let registry = std::env::var_os(crate::gpus::REGISTRY_ENV).filter(|v| !v.is_empty());
    let visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    let euid = nix::unistd::geteuid().as_raw();
    let _gpus = crate::gpus::claim(registry.as_ref().map(Path::new), euid, visible.as_deref())?;
    crate::config::hold(crate::config::HOLD_ENV).context(crate::config::HOLD_ENV)?;
    let _ = std::fs::remove_file(paths.socket());
    let listener = UnixListener::bind(paths.socket())
        .with_context(|| format!("binding {}", paths.socket().display()))?;
    crate::users::open_to_every_user(paths)?;
    if background {
        let (rd, wr) = nix::unistd::pipe().context("pipe")?;
        // SAFETY: the process is single-threaded here (no thread has been spawned yet),
        // so the child may keep running Rust code after fork.
        match unsafe { nix::unistd::fork() }.context("fork")? {
            nix::unistd::ForkResult::Parent { .. } => {
                drop(wr);
                let mut msg = String::new();
                let _ = std::fs::File::from(rd).read_to_string(&mut msg);
                if msg == "ok" {
                    Ok(0)
                } else {
                    Err(anyhow!("the MPS control daemon failed to start: {msg}"))
                }
            }
            nix::unistd::ForkResult::Child => {
                drop(rd);
                nix::unistd::setsid().context("setsid")?;
                // SAFETY: still single-threaded (see above).
                let second = unsafe { nix::unistd::fork() }.context("fork")?;
                if let nix::unistd::ForkResult::Parent { .. } = second {
                    // SAFETY: _exit skips destructors so the inherited listener is not touched.
                    unsafe { libc::_exit(0) };
                }
                let _ = std::env::set_current_dir("/");
                redirect_stdio()?;
                let mut wr = std::fs::File::from(wr);
                match serve_setup(paths, false, fault) {
                    Ok(state) => {
                        let _ = wr.write_all(b"ok");
                        drop(wr);
                        serve(paths, listener, state, fault, lock)
                    }
                    Err(e) => {
                        let _ = wr.write_all(format!("{e:#}").as_bytes());
                        Ok(1)
                    }
                }
            }
        }
    } else {
        let state = serve_setup(paths, true, fault)?;
        serve(paths, listener, state, fault, lock)
    }
}

fn redirect_stdio() -> Result<()> {
    let null = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
        .context("opening /dev/null")?;
    for fd in 0..=2 {
        // SAFETY: dup2 of a valid fd onto the standard descriptors.
        unsafe { libc::dup2(null.as_raw_fd(), fd) };
    }
    Ok(())
}

fn serve_setup(paths: &Paths, foreground: bool, fault: Fault) -> Result<Shared> {
    write_pid_file(paths)?;
    let pid = std::process::id();
    let control_log = Arc::new(LogFile::open(&paths.control_log(), "Control", foreground));
    let server_log = Arc::new(LogFile::open(&paths.server_log(), "Server", foreground));
    let socket = paths.socket();
    control_log.line(
        pid,
        &format!("Starting control daemon using socket {}", socket.display()),
    );
    control_log.line(
        pid,
        &format!(
            "To connect CUDA applications to this daemon, set env CUDA_MPS_PIPE_DIRECTORY={}",
            paths.pipe_dir.display()
        ),
    );
    control_log.line(pid, "CUDA MPS Control binary version: 13030");
    let visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    let devices = Devices::from_visible(visible.as_deref());
    let (default_atp, default_pinned) = match fault {
        Fault::IgnoreEnvLimits => (100.0, PinnedLimits::new()),
        _ => env_defaults(&devices)?,
    };
    Ok(Arc::new(Mutex::new(State {
        pid,
        devices,
        default_atp,
        default_pinned,
        default_priority: 0,
        servers: Default::default(),
        clients: Default::default(),
        pending: Default::default(),
        control_log,
        server_log,
        exe: std::env::current_exe().context("locating own executable")?,
        log_dir: paths.log_dir.clone(),
        pipe_dir: paths.pipe_dir.clone(),
        wedged: false,
        commands_answered: 0,
        quit_deadline: None,
        fault,
    })))
}

/// The daemon's own `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` / `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`
/// are its defaults from the first moment (NVIDIA MPS docs, "Environment Variables": set in the
/// control daemon's environment they configure the default of every MPS server it spawns, as
/// `set_default_*` would), so no server ever starts without them. A bad value fails the start.
fn env_defaults(devices: &Devices) -> Result<(f64, PinnedLimits)> {
    let get = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    let atp = get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")
        .map(|v| parse_percentage(&v))
        .transpose()
        .map_err(|e| anyhow!("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE: {e}"))?
        .unwrap_or(100.0);
    let pinned = get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT")
        .map(|v| parse_pinned_env(devices, &v))
        .transpose()
        .map_err(|e| anyhow!("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: {e}"))?
        .unwrap_or_default();
    Ok((atp, pinned))
}

fn serve(
    paths: &Paths,
    listener: UnixListener,
    state: Shared,
    fault: Fault,
    _lock: std::fs::File,
) -> Result<i32> {
    {
        let (state, paths) = (state.clone(), paths.clone());
        std::thread::spawn(move || monitor(state, paths));
    }
    for conn in listener.incoming() {
        let Ok(stream) = conn else { continue };
        let (state, paths) = (state.clone(), paths.clone());
        if let Ok(st) = state.lock() {
            st.log("Accepting connection...");
        }
        std::thread::spawn(move || {
            let _ = handle(stream, state, &paths, fault);
        });
    }
    Ok(0)
}

fn monitor(state: Shared, paths: Paths) {
    loop {
        std::thread::sleep(Duration::from_millis(100));
        let Ok(mut st) = state.lock() else { return };
        st.reap();
        if let Some(deadline) = st.quit_deadline {
            if (st.clients.is_empty() && st.pending.is_empty()) || Instant::now() >= deadline {
                quit(&mut st, &paths, None);
            }
        }
    }
}

/// Orderly shutdown: remove the socket and pid file (so nobody new can connect), terminate
/// clients and servers, answer the `quit` (if any) and exit: when `echo quit |
/// nvidia-cuda-mps-control` returns, the socket is already gone.
fn quit(st: &mut State, paths: &Paths, ui: Option<&mut UnixStream>) -> ! {
    let _ = std::fs::remove_file(paths.socket());
    let _ = std::fs::remove_file(paths.pid_file());
    st.shutdown_all();
    st.log("Exit");
    if let Some(stream) = ui {
        let _ = stream.write_all(b"\0");
    }
    std::process::exit(0)
}

fn hang(reader: &mut impl Read) {
    let mut buf = [0u8; 256];
    while matches!(reader.read(&mut buf), Ok(n) if n > 0) {}
}

fn handle(stream: UnixStream, state: Shared, paths: &Paths, fault: Fault) -> Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut hello = String::new();
    reader.read_line(&mut hello)?;
    let hello = hello.trim_end_matches('\n');
    if state.lock().map(|s| s.wedged).unwrap_or(true) {
        hang(&mut reader);
        return Ok(());
    }
    if hello == "UI" {
        state.lock().map_err(|_| anyhow!("poisoned"))?.log("NEW UI");
        return handle_ui(stream, reader, state, paths, fault);
    }
    let fields: Vec<&str> = hello.split('\t').collect();
    if fields.len() == 5 && fields[0] == "CLIENT" {
        let peer = crate::users::peer_credentials(&stream);
        return handle_client(stream, reader, state, &fields, peer);
    }
    if let Ok(st) = state.lock() {
        st.log("User did not send valid credentials");
    }
    Ok(())
}

fn handle_ui(
    mut stream: UnixStream,
    mut reader: BufReader<UnixStream>,
    state: Shared,
    paths: &Paths,
    fault: Fault,
) -> Result<()> {
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let cmd = line.trim();
        let mut st = state.lock().map_err(|_| anyhow!("poisoned"))?;
        if st.wedged {
            drop(st);
            hang(&mut reader);
            return Ok(());
        }
        st.log(&format!("Cmd:{cmd}"));
        let action = match fault {
            Fault::WedgeAfter(n) if st.commands_answered >= n => Action::Wedge,
            Fault::CrashAfter(n) if st.commands_answered >= n => Action::Crash,
            _ => execute(&mut st, cmd),
        };
        match action {
            Action::Reply(text) => {
                st.commands_answered += 1;
                drop(st);
                stream.write_all(text.as_bytes())?;
                stream.write_all(b"\0")?;
            }
            Action::QuitAfter(secs) => {
                st.quit_deadline = Some(Instant::now() + Duration::from_secs(secs));
                drop(st);
                stream.write_all(b"\0")?;
            }
            Action::Quit => quit(&mut st, paths, Some(&mut stream)),
            // SAFETY: _exit ends the process at once, like a crash: no cleanup, no unwinding.
            Action::Crash => unsafe { libc::_exit(134) },
            Action::Wedge => {
                st.wedged = true;
                drop(st);
                hang(&mut reader);
                return Ok(());
            }
        }
    }
}

fn handle_client(
    stream: UnixStream,
    mut reader: BufReader<UnixStream>,
    state: Shared,
    f: &[&str],
    peer: Option<(u32, u32)>,
) -> Result<()> {
    let opt = |s: &str| (s != "-").then(|| s.to_string());
    let parsed = (|| -> Result<Request, RequestError> {
        let st = state.lock().map_err(|_| RequestError::Poisoned)?;
        let claimed: u32 = f[2]
            .parse()
            .map_err(|_| RequestError::Uid(f[2].to_string()))?;
        // A client is the user it runs as (SO_PEERCRED); only root may name another uid (the
        // simulation's stand-in for clients of several users run by one test).
        let (uid, run_as) = match peer {
            Some((0, _)) | None => (claimed, None),
            Some((uid, gid)) => (uid, Some((uid, gid))),
        };
        Ok(Request {
            pid: f[1]
                .parse()
                .map_err(|_| RequestError::Pid(f[1].to_string()))?,
            uid,
            run_as,
            active_thread_percentage: opt(f[3]).map(|v| parse_percentage(&v)).transpose()?,
            pinned: opt(f[4])
                .map(|v| parse_pinned_env(&st.devices, &v))
                .transpose()?
                .unwrap_or_default(),
        })
    })();
    let req = match parsed {
        Ok(r) => r,
        Err(e) => {
            crate::state::send(&stream, &format!("ERROR {e}"));
            return Ok(());
        }
    };
    let pid = req.pid;
    let _ = stream.set_write_timeout(Some(Duration::from_secs(2)));
    let accepted = state
        .lock()
        .map_err(|_| anyhow!("poisoned"))?
        .client_connect(req, stream.try_clone()?);
    hang(&mut reader);
    if accepted {
        if let Ok(mut st) = state.lock() {
            st.client_gone(pid);
        }
    }
    Ok(())
}
