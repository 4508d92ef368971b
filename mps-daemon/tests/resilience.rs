//! One stuck GPU, a connection flood and fd exhaustion: the supervisor keeps supervising every
//! other GPU, answers HTTP within a bound, and never kills a healthy control daemon because of a
//! failure of its own side.
// Test support: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

const FAST: &str = "  probeInterval: 300ms\n  commandTimeout: 5s\n  maxRestartBackoff: 1s\n";
/// `gpu_mps_daemon::http::MAX_CONNECTIONS`.
const HTTP_CAP: usize = 32;

fn pid_of(g: &Value) -> i64 {
    g["pid"].as_i64().expect("pid")
}

/// GET `path`, asserting an answer with `code` within `bound`.
fn get_within(d: &Daemon, path: &str, code: u16, bound: Duration) {
    let t = Instant::now();
    let (got, body) = d.get(path);
    assert!(
        t.elapsed() < bound,
        "{path} took {:?}; log:\n{}",
        t.elapsed(),
        d.log_text()
    );
    assert_eq!(got, code, "{path}: {body}");
}

#[test]
fn a_wedged_gpu_delays_neither_the_other_gpus_nor_http() {
    let node = Node::new(2, 16000);
    node.write_config("      - {name: r, replicas: 2, devices: all}\n", FAST);
    let d = node.start();
    let old0 = pid_of(&node.wait_ready(0));
    let old1 = pid_of(&node.wait_ready(1));
    control_detached(&node.pipe(0), "sim_wedge", 20);
    node.control(1, "sim_crash");
    let start = Instant::now();
    let mut back = [false, false];
    while back != [true, true] {
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "GPUs not restarted ({back:?}); log:\n{}",
            d.log_text()
        );
        get_within(&d, "/healthz", 200, Duration::from_secs(1));
        let t = Instant::now();
        let (code, _) = d.get("/readyz");
        assert!(t.elapsed() < Duration::from_secs(1) && (code == 200 || code == 503));
        get_within(&d, "/metrics", 200, Duration::from_secs(1));
        for (slot, (i, old)) in back.iter_mut().zip([(0, old0), (1, old1)]) {
            *slot = node
                .gpu_status(i)
                .is_some_and(|g| g["state"] == "ready" && g["pid"].as_i64() != Some(old));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn nofile_limit(soft: u64, hard: u64) -> impl Fn() -> std::io::Result<()> {
    move || {
        let l = libc::rlimit {
            rlim_cur: soft,
            rlim_max: hard,
        };
        // SAFETY: setrlimit with a valid struct; async-signal-safe, called between fork and exec.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &l) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }
}

#[test]
fn a_connection_flood_is_capped_and_restarts_nothing() {
    use std::io::Read;
    use std::os::unix::process::CommandExt;
    let node = Node::new(1, 16000);
    node.write_config("      - {name: r, replicas: 2, devices: all}\n", FAST);
    let d = node.start_with(|c| {
        // SAFETY: the closure only calls setrlimit (async-signal-safe).
        unsafe { c.pre_exec(nofile_limit(128, 128)) };
    });
    let pid = pid_of(&node.wait_ready(0));
    let flood: Vec<TcpStream> = (0..300)
        .filter_map(|_| TcpStream::connect(("127.0.0.1", d.port)).ok())
        .collect();
    assert!(
        flood.len() >= 250,
        "only {} connections opened",
        flood.len()
    );
    std::thread::sleep(Duration::from_millis(1500));
    let closed = flood
        .iter()
        .filter(|s| {
            s.set_nonblocking(true).unwrap();
            let mut b = [0u8; 16];
            let mut r: &TcpStream = s;
            !matches!(r.read(&mut b), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
        })
        .count();
    assert!(
        closed + HTTP_CAP + 8 >= flood.len(),
        "only {closed} of {} flood connections were closed by the server",
        flood.len()
    );
    let g = node.gpu_status(0).unwrap();
    assert_eq!((pid_of(&g), &g["restarts"]), (pid, &Value::from(0)), "{g}");
    drop(flood);
    wait_for("readyz after the flood", || {
        (d.get("/readyz").0 == 200).then_some(())
    });
    let g = node.gpu_status(0).unwrap();
    assert_eq!((pid_of(&g), &g["restarts"]), (pid, &Value::from(0)), "{g}");
}

fn set_nofile(pid: i32, soft: u64, hard: u64) {
    let l = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: prlimit on our own child with a valid struct and no old-limit output.
    let rc = unsafe { libc::prlimit(pid, libc::RLIMIT_NOFILE, &l, std::ptr::null_mut()) };
    assert_eq!(rc, 0, "prlimit: {}", std::io::Error::last_os_error());
}

#[test]
fn fd_exhaustion_never_restarts_a_healthy_control_daemon() {
    let node = Node::new(1, 16000);
    node.write_config("      - {name: r, replicas: 2, devices: all}\n", FAST);
    let d = node.start();
    let pid = pid_of(&node.wait_ready(0));
    // Not one more fd: no probe client can be spawned, no socket opened, no /proc file read.
    let open = std::fs::read_dir(format!("/proc/{}/fd", d.pid()))
        .unwrap()
        .count();
    let open = u64::try_from(open).unwrap();
    set_nofile(d.pid(), open, 4096);
    std::thread::sleep(Duration::from_millis(2000));
    set_nofile(d.pid(), 4096, 4096);
    std::thread::sleep(Duration::from_millis(1000));
    let g = wait_for("status after the exhaustion", || node.gpu_status(0));
    assert_eq!(pid_of(&g), pid, "{g}; log:\n{}", d.log_text());
    assert_eq!(g["restarts"], 0, "{g}; log:\n{}", d.log_text());
    assert_eq!(g["state"], "ready", "{g}");
    assert!(alive(pid));
    let m = d.get("/metrics").1;
    let u = uuid(0);
    let labels = [("gpu", "0"), ("UUID", u.as_str())];
    let n = metric(&m, "gpuhook_mps_probes_inconclusive_total", &labels);
    assert!(n.is_some_and(|n| n >= 1.0), "{m}");
}

#[test]
fn the_soft_fd_limit_is_raised_up_to_the_hard_one() {
    use std::os::unix::process::CommandExt;
    let node = Node::new(1, 16000);
    node.write_config("      - {name: r, replicas: 2, devices: all}\n", FAST);
    let d = node.start_with(|c| {
        // SAFETY: the closure only calls setrlimit (async-signal-safe).
        unsafe { c.pre_exec(nofile_limit(256, 4096)) };
    });
    node.wait_ready(0);
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", d.pid())).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    let v: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(&v[3..5], ["4096", "4096"], "{line}");
}
