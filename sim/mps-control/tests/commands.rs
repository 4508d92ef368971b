//! Command replies and MPS semantics (defaults, per-server settings, client limits,
//! terminate_client, one server at a time).
// Test support: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;

fn server_list(m: &Mps) -> Vec<i32> {
    m.ctl("get_server_list")
        .lines()
        .map(|l| l.parse().unwrap())
        .collect()
}

fn cmdline(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
        .unwrap_or_default()
        .replace('\0', " ")
}

#[test]
fn reply_formats() {
    let m = Mps::new();
    m.start_ok();
    assert_eq!(m.ctl("get_server_list"), "");
    assert_eq!(m.ctl("get_default_active_thread_percentage"), "100.0\n");
    assert_eq!(m.ctl("set_default_active_thread_percentage 25"), "25.0\n");
    assert_eq!(m.ctl("get_default_active_thread_percentage"), "25.0\n");
    assert_eq!(m.ctl("set_default_device_pinned_mem_limit 0 4096M"), "");
    assert_eq!(m.ctl("get_default_device_pinned_mem_limit 0"), "4096M\n");
    // By UUID, normalised to the ordinal in CUDA_VISIBLE_DEVICES.
    let uuid1 = "GPU-22222222-2222-2222-2222-222222222222";
    assert_eq!(
        m.ctl(&format!("set_default_device_pinned_mem_limit {uuid1} 2G")),
        ""
    );
    assert_eq!(m.ctl("get_default_device_pinned_mem_limit 1"), "2048M\n");
    assert_eq!(
        m.ctl(&format!("get_default_device_pinned_mem_limit {uuid1}")),
        "2048M\n"
    );
    assert!(m
        .ctl("set_default_device_pinned_mem_limit 5 1G")
        .contains("Invalid device"));
    assert!(m
        .ctl("set_default_device_pinned_mem_limit 0 lots")
        .contains("Invalid memory limit"));
    assert!(m
        .ctl("set_default_active_thread_percentage 150")
        .contains("Invalid active thread percentage"));
    assert_eq!(
        m.ctl("get_default_active_thread_percentage"),
        "25.0\n",
        "bad value ignored"
    );
    assert_eq!(m.ctl("get_default_client_priority"), "0\n");
    assert_eq!(m.ctl("set_default_client_priority 1"), "");
    assert_eq!(m.ctl("get_default_client_priority"), "1\n");
    assert!(m
        .ctl("set_default_client_priority 2")
        .contains("Invalid client priority"));
    assert!(m
        .ctl("frobnicate")
        .starts_with("Unrecognized command: frobnicate"));
    assert!(m
        .ctl("get_server_status")
        .contains("Wrong number of arguments"));
    assert!(m.ctl("get_server_status 99999999").contains("not found"));

    assert_eq!(m.ctl("start_server -uid 1234"), "");
    let servers = server_list(&m);
    assert_eq!(servers.len(), 1);
    let s = servers[0];
    assert!(pid_alive(s), "server pid is a real process");
    assert!(
        cmdline(s).starts_with("nvidia-cuda-mps-server"),
        "{}",
        cmdline(s)
    );
    assert_eq!(m.ctl(&format!("get_server_status {s}")), "ACTIVE\n");
    assert_eq!(m.ctl(&format!("get_client_list {s}")), "");
    assert_eq!(
        m.ctl(&format!("get_active_thread_percentage {s}")),
        "25.0\n"
    );
    assert_eq!(
        m.ctl(&format!("get_device_pinned_mem_limit {s} 0")),
        "4096M\n"
    );
    assert!(m.ctl("start_server -uid 99").contains("already running"));
    assert!(m.ctl("ps").starts_with("     PID"));
    // Several commands in one session, replies in order.
    let out = m.ctl("get_default_active_thread_percentage\nget_default_device_pinned_mem_limit 1");
    assert_eq!(out, "25.0\n2048M\n");
    m.ctl("quit");
    wait_until("server exit", || !pid_alive(s));
}

#[test]
fn defaults_apply_only_to_servers_started_afterwards() {
    let m = Mps::new();
    m.start_ok();
    let a = m.client(1, &[]);
    assert!(a
        .attached()
        .ends_with("active_thread_percentage=100.0 pinned_mem_limit=none"));
    let s1 = server_list(&m)[0];
    m.ctl("set_default_active_thread_percentage 25");
    m.ctl("set_default_device_pinned_mem_limit 0 4G");
    assert_eq!(
        m.ctl(&format!("get_active_thread_percentage {s1}")),
        "100.0\n"
    );
    assert_eq!(
        m.ctl(&format!("get_device_pinned_mem_limit {s1} 0")),
        "0M\n"
    );
    // A later client of the same server still gets the server's (old) values.
    let b = m.client(1, &[]);
    assert!(b
        .attached()
        .ends_with("active_thread_percentage=100.0 pinned_mem_limit=none"));
    drop((a, b));
    // A client of another uid replaces the server; the new one carries the new defaults.
    let c = m.client(2, &[]);
    let line = c.attached();
    assert!(
        line.ends_with("active_thread_percentage=25.0 pinned_mem_limit=0=4096M"),
        "{line}"
    );
    let s2 = server_list(&m)[0];
    assert_ne!(s1, s2);
    assert!(line.starts_with(&format!("server={s2} ")));
    assert_eq!(
        m.ctl(&format!("get_active_thread_percentage {s2}")),
        "25.0\n"
    );
    assert_eq!(
        m.ctl(&format!("sim_get_client_limits {}", c.pid())),
        "active_thread_percentage=25.0 pinned_mem_limit=0=4096M\n"
    );
}

#[test]
fn per_server_settings_apply_to_clients_connecting_afterwards() {
    let m = Mps::new();
    m.start_ok();
    m.ctl("set_default_active_thread_percentage 50");
    let a = m.client(1, &[]);
    a.attached();
    let s = server_list(&m)[0];
    assert_eq!(
        m.ctl(&format!("set_active_thread_percentage {s} 20")),
        "20.0\n"
    );
    assert_eq!(m.ctl(&format!("set_device_pinned_mem_limit {s} 1 1G")), "");
    assert_eq!(
        m.ctl(&format!("get_active_thread_percentage {s}")),
        "20.0\n"
    );
    assert_eq!(
        m.ctl(&format!("get_device_pinned_mem_limit {s} 1")),
        "1024M\n"
    );
    assert_eq!(
        m.ctl(&format!("sim_get_client_limits {}", a.pid())),
        "active_thread_percentage=50.0 pinned_mem_limit=none\n",
        "existing client keeps what it connected with"
    );
    let b = m.client(1, &[]);
    assert!(b
        .attached()
        .ends_with("active_thread_percentage=20.0 pinned_mem_limit=1=1024M"));
    assert!(m
        .ctl("set_active_thread_percentage 1 20")
        .contains("not found"));
}

#[test]
fn clients_can_only_lower_their_limits() {
    let m = Mps::new();
    m.start_ok();
    m.ctl("set_default_active_thread_percentage 25");
    m.ctl("set_default_device_pinned_mem_limit 0 4G");
    let low = m.client(
        1,
        &[
            ("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "10"),
            ("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=8G,1=512M"),
        ],
    );
    assert!(low
        .attached()
        .ends_with("active_thread_percentage=10.0 pinned_mem_limit=0=4096M,1=512M"));
    let high = m.client(1, &[("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "80")]);
    assert!(high
        .attached()
        .ends_with("active_thread_percentage=25.0 pinned_mem_limit=0=4096M"));
    let mut bad = m.client(1, &[("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=huge")]);
    assert_eq!(bad.wait_exit(), 5);
    let s = server_list(&m)[0];
    let mut listed: Vec<u32> = m
        .ctl(&format!("get_client_list {s}"))
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    listed.sort();
    let mut want = vec![low.pid(), high.pid()];
    want.sort();
    assert_eq!(listed, want);
}

#[test]
fn terminate_client_ends_the_client_process() {
    let m = Mps::new();
    m.start_ok();
    let mut a = m.client(1, &[]);
    a.attached();
    let b = m.client(1, &[]);
    b.attached();
    let s = server_list(&m)[0];
    assert_eq!(m.ctl(&format!("terminate_client {s} {}", a.pid())), "0\n");
    assert_eq!(a.wait_exit(), 2);
    assert_eq!(
        m.ctl(&format!("get_client_list {s}")),
        format!("{}\n", b.pid())
    );
    assert!(m
        .ctl(&format!("terminate_client {s} {}", a.pid()))
        .contains("not found"));
    assert!(m
        .ctl(&format!("sim_get_client_limits {}", a.pid()))
        .contains("not found"));
    // The server stays for later clients of its uid.
    assert_eq!(server_list(&m), vec![s]);
}

#[test]
fn one_active_server_other_uids_queue() {
    let m = Mps::new();
    m.start_ok();
    let mut a = m.client(1, &[]);
    a.attached();
    let s1 = server_list(&m)[0];
    let b = m.client(2, &[]);
    assert_eq!(b.next_line(), "pending");
    // A later client of uid 1 queues behind uid 2 (the server is draining).
    let c = m.client(1, &[]);
    assert_eq!(c.next_line(), "pending");
    assert_eq!(server_list(&m), vec![s1]);
    assert_eq!(m.ctl(&format!("get_server_status {s1}")), "TERMINATING\n");
    assert_eq!(
        m.ctl("sim_get_pending_list"),
        format!("{}\n{}\n", b.pid(), c.pid())
    );
    a.child.kill().unwrap();
    a.wait_exit();
    let line = b.attached();
    wait_until("old server exit", || !pid_alive(s1));
    let s2 = server_list(&m);
    assert_eq!(s2.len(), 1);
    assert_ne!(s2[0], s1);
    assert!(line.starts_with(&format!("server={} ", s2[0])));
    drop(b);
    let line = c.attached();
    let s3 = server_list(&m);
    assert!(line.starts_with(&format!("server={} ", s3[0])));
    assert_ne!(s3[0], s2[0]);
}

#[test]
fn server_death_terminates_its_clients() {
    let m = Mps::new();
    m.start_ok();
    let mut a = m.client(1, &[]);
    a.attached();
    let s = server_list(&m)[0];
    // SAFETY: kill(2) on the server process our own test daemon started.
    unsafe { libc::kill(s, libc::SIGKILL) };
    assert_eq!(a.wait_exit(), 2);
    wait_until("server forgotten", || server_list(&m).is_empty());
    assert!(m.control_log().contains(&format!("Server {s} exited")));
}

#[test]
fn hold_elapses_and_client_is_forgotten() {
    let m = Mps::new();
    m.start_ok();
    let mut c = m.cmd();
    let out = c
        .args(["--sim-client", "--uid", "4", "--hold", "0.2"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let s = server_list(&m)[0];
    wait_until("client forgotten", || {
        m.ctl(&format!("get_client_list {s}")).is_empty()
    });
    // No daemon: a CUDA app would run without MPS; the stand-in says so.
    m.ctl("quit");
    let out = m
        .cmd()
        .args(["--sim-client", "--uid", "4"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4));
}

#[test]
fn fault_ignore_uuid_limits_drops_limits_set_by_uuid() {
    let mut m = Mps::new();
    m.fault = Some("ignore-uuid-limits".into());
    m.start_ok();
    let uuid0 = "GPU-11111111-1111-1111-1111-111111111111";
    assert_eq!(
        m.ctl(&format!("set_default_device_pinned_mem_limit {uuid0} 2G")),
        ""
    );
    assert_eq!(m.ctl("get_default_device_pinned_mem_limit 0"), "0M\n");
    assert_eq!(m.ctl("set_default_device_pinned_mem_limit 0 2G"), "");
    assert_eq!(
        m.ctl(&format!("get_default_device_pinned_mem_limit {uuid0}")),
        "2048M\n"
    );
}

#[test]
fn limits_in_the_daemon_environment_are_its_defaults_from_the_start() {
    let m = Mps::new();
    let out = m
        .cmd()
        .arg("-d")
        .env("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "25")
        .env("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=4096M")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    // A client that connects before any set_default_* gets the environment's limits.
    let c = m.client(1000, &[]);
    assert!(
        c.attached()
            .ends_with("active_thread_percentage=25.0 pinned_mem_limit=0=4096M"),
        "client limits"
    );
    assert_eq!(m.ctl("get_default_active_thread_percentage"), "25.0\n");
    assert_eq!(m.ctl("get_default_device_pinned_mem_limit 0"), "4096M\n");
    // A bad value fails the start with the variable's name.
    let m2 = Mps::new();
    let out = m2
        .cmd()
        .arg("-d")
        .env("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "250")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"));
}
