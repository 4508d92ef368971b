//! Daemon lifecycle: start, single instance, quit, client mode without a daemon, faults, log.
// Test support: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use std::process::Stdio;
use std::time::Duration;

#[test]
fn start_second_instance_fails_and_quit_cleans_up() {
    let m = Mps::new();
    m.start_ok();
    let pid = m.daemon_pid().expect("pid file written before -d returned");
    assert!(pid_alive(pid));
    assert!(exists(&m.pipe().join("control")));
    // The daemon is listening as soon as -d returned.
    assert_eq!(m.ctl("get_server_list"), "");

    let second = m.start();
    assert_eq!(second.status.code(), Some(1));
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(
        err.contains("An instance of this daemon is already running"),
        "{err}"
    );
    assert_eq!(
        m.daemon_pid(),
        Some(pid),
        "second -d must not touch the pid file"
    );

    let out = m.control("quit\n");
    assert!(out.status.success(), "{out:?}");
    wait_until("daemon exit", || !pid_alive(pid));
    assert!(!exists(&m.pipe().join("control")));
    assert!(!exists(&m.pipe().join("nvidia-cuda-mps-control.pid")));
    // And it can be started again.
    m.start_ok();
    m.ctl("quit");
}

#[test]
fn concurrent_starts_yield_exactly_one_daemon() {
    let m = Mps::new();
    let mut children: Vec<_> = (0..4)
        .map(|_| {
            m.cmd()
                .arg("-d")
                .stdin(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let codes: Vec<_> = children
        .iter_mut()
        .map(|c| c.wait().unwrap().code())
        .collect();
    assert_eq!(
        codes.iter().filter(|c| **c == Some(0)).count(),
        1,
        "{codes:?}"
    );
    assert_eq!(
        codes.iter().filter(|c| **c == Some(1)).count(),
        3,
        "{codes:?}"
    );
    assert_eq!(m.ctl("get_server_list"), "");
    m.ctl("quit");
}

#[test]
fn client_mode_without_daemon_exits_1() {
    let m = Mps::new();
    let out = m.control("get_server_list\n");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("Cannot find MPS control daemon process"));
    assert!(out.stdout.is_empty());
}

#[test]
fn overlong_socket_path_is_refused_with_the_fix() {
    let mut m = Mps::new();
    m.visible = None;
    let long = m.dir.path().join("p".repeat(110));
    let out = m
        .cmd()
        .env("CUDA_MPS_PIPE_DIRECTORY", &long)
        .arg("-d")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("108") || err.contains("107"), "{err}");
    assert!(err.contains("CUDA_MPS_PIPE_DIRECTORY"), "{err}");
}

#[test]
fn control_log_has_nvidia_format() {
    let m = Mps::new();
    m.start_ok();
    let pid = m.daemon_pid().unwrap();
    m.ctl("set_default_active_thread_percentage 25");
    let c = m.client(1000, &[]);
    c.attached();
    m.ctl("quit");
    wait_until("daemon exit", || !pid_alive(pid));
    let log = m.control_log();
    let tag = format!("Control {pid:>5}]");
    let sock = m.pipe().join("control");
    for want in [
        format!(
            "{tag} Starting control daemon using socket {}",
            sock.display()
        ),
        format!("{tag} Accepting connection..."),
        format!("{tag} NEW UI"),
        format!("{tag} Cmd:set_default_active_thread_percentage 25"),
        format!("{tag} NEW CLIENT {} from user 1000", c.pid()),
        format!("{tag} Cmd:quit"),
    ] {
        assert!(log.contains(&want), "missing {want:?} in\n{log}");
    }
    assert!(log.contains("Starting new server"), "{log}");
    for line in log.lines() {
        // [YYYY-MM-DD HH:MM:SS.mmm Control ppppp] message
        let b = line.as_bytes();
        assert_eq!(b[0], b'[', "{line}");
        assert_eq!(&line[5..6], "-", "{line}");
        assert_eq!(&line[20..21], ".", "{line}");
        assert_eq!(&line[24..32], " Control", "{line}");
        assert_eq!(&line[38..40], "] ", "{line}");
    }
    let slog = std::fs::read_to_string(m.log().join("server.log")).unwrap();
    assert!(
        slog.contains(&format!("New client {} connected", c.pid())),
        "{slog}"
    );
}

#[test]
fn crash_leaves_socket_and_pid_file_and_restart_works() {
    let m = Mps::new();
    m.start_ok();
    let pid = m.daemon_pid().unwrap();
    let mut c = m.client(7, &[]);
    c.attached();
    let server: i32 = m.ctl("get_server_list").trim().parse().unwrap();
    let out = m.control("sim_crash\n");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    wait_until("daemon death", || !pid_alive(pid));
    assert!(exists(&m.pipe().join("control")), "stale socket stays");
    assert_eq!(m.daemon_pid(), Some(pid), "stale pid file stays");
    assert_eq!(c.wait_exit(), 3, "client lost its daemon");
    wait_until("server death", || !pid_alive(server));
    let out = m.control("get_server_list\n");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("Cannot find MPS control daemon process"));
    // A stale instance does not block a new one.
    m.start_ok();
    assert_ne!(m.daemon_pid(), Some(pid));
    m.ctl("quit");
}

fn assert_hangs(m: &Mps, cmd: &str) {
    let mut child = m
        .cmd()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("{cmd}\n").as_bytes())
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert!(child.try_wait().unwrap().is_none(), "{cmd} answered");
    child.kill().unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.stdout.is_empty());
}

#[test]
fn wedge_accepts_but_never_answers() {
    let m = Mps::new();
    m.start_ok();
    let pid = m.daemon_pid().unwrap();
    assert_hangs(&m, "sim_wedge");
    assert_hangs(&m, "get_server_list");
    assert!(pid_alive(pid));
    assert!(m.control_log().contains("Accepting connection..."));
}

#[test]
fn fault_env_wedges_after_n_commands() {
    let mut m = Mps::new();
    m.fault = Some("wedge-after:2".into());
    m.start_ok();
    assert_eq!(m.ctl("get_default_active_thread_percentage"), "100.0\n");
    assert_eq!(m.ctl("get_default_client_priority"), "0\n");
    assert_hangs(&m, "get_server_list");
}

#[test]
fn foreground_mode_serves_until_quit_and_logs_to_stdout() {
    let m = Mps::new();
    let mut d = m
        .cmd()
        .arg("-f")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = d.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        use std::io::Read;
        let mut s = String::new();
        let mut stdout = stdout;
        let _ = stdout.read_to_string(&mut s);
        s
    });
    wait_until("answer", || m.control("get_server_list\n").status.success());
    assert_eq!(
        m.daemon_pid(),
        Some(i32::try_from(d.id()).expect("a pid fits in i32"))
    );
    m.ctl("quit");
    assert_eq!(d.wait().unwrap().code(), Some(0));
    let out = reader.join().unwrap();
    let tag = format!("Control {:>5}]", d.id());
    assert!(
        out.contains(&format!("{tag} Starting control daemon using socket")),
        "{out}"
    );
    assert!(out.contains(&format!("{tag} Cmd:quit")), "{out}");
    assert_eq!(out, m.control_log(), "stdout mirrors control.log");
}

#[test]
fn quit_with_timeout_waits_for_clients() {
    let m = Mps::new();
    m.start_ok();
    let pid = m.daemon_pid().unwrap();
    let mut c = m.client(3, &[]);
    c.attached();
    m.ctl("quit -t 60");
    // New clients are refused while the daemon drains.
    let mut refused = m.client(3, &[]);
    assert_eq!(refused.wait_exit(), 5);
    assert!(pid_alive(pid), "still draining while a client runs");
    c.child.kill().unwrap();
    wait_until("daemon exit after last client", || !pid_alive(pid));
    assert!(!exists(&m.pipe().join("control")));
}
