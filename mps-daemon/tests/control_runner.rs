//! The command runner on its own, with a scripted stand-in for the control binary: a clean
//! environment, exit status 1 as "no daemon", and a client killed when its timeout expires.
// Test support: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use gpu_mps_daemon::control::{ControlEnv, ControlError};
use gpu_mps_daemon::layout::GpuLayout;
use gpu_mps_daemon::plan::GpuPlan;

fn script(dir: &Path, body: &str) -> PathBuf {
    let p = dir.join("nvidia-cuda-mps-control");
    gpuhook_fs::testing::write_executable(&p, &format!("#!/bin/sh\n{body}\n")).unwrap();
    p
}

fn env_for(dir: &Path, binary: PathBuf) -> ControlEnv {
    let plan = GpuPlan {
        index: 0,
        uuid: "GPU-12345678-0000-0000-0000-000000000000".into(),
        resource: "r".into(),
        replicas: 2,
        memory_mib: 1000,
        active_thread_percentage: 50,
        pinned_memory_limit_mib: Some(500),
        shm_size: None,
        driver_root: PathBuf::from("/"),
        control_binary: binary,
        shares: Vec::new(),
        client_user: None,
    };
    ControlEnv::new(&plan, &GpuLayout::new(dir, &plan.uuid), None)
}

#[tokio::test]
async fn replies_come_from_stdout_with_a_clean_environment() {
    let t = tempfile::tempdir().unwrap();
    let bin = script(t.path(), "read cmd; echo \"got $cmd\"; env | sort");
    std::env::set_var("GPUHOOK_LEAK_CHECK", "1");
    let out = env_for(t.path(), bin)
        .send("get_server_list", Duration::from_secs(10))
        .await
        .unwrap();
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("got get_server_list"));
    let vars: Vec<&str> = lines
        .filter(|l| !l.starts_with("PWD=") && !l.starts_with("SHLVL=") && !l.starts_with("_="))
        .collect();
    let pipe = t
        .path()
        .join("GPU-12345678-0000-0000-0000-000000000000/pipe");
    let log = t
        .path()
        .join("GPU-12345678-0000-0000-0000-000000000000/log");
    assert_eq!(
        vars,
        vec![
            format!("CUDA_MPS_LOG_DIRECTORY={}", log.display()),
            format!("CUDA_MPS_PIPE_DIRECTORY={}", pipe.display()),
            "CUDA_VISIBLE_DEVICES=GPU-12345678-0000-0000-0000-000000000000".to_string(),
            "PATH=/usr/sbin:/usr/bin:/sbin:/bin".to_string(),
        ]
    );
}

#[tokio::test]
async fn exit_status_one_means_no_daemon() {
    let t = tempfile::tempdir().unwrap();
    let bin = script(
        t.path(),
        "echo 'Cannot find MPS control daemon process' >&2; exit 1",
    );
    let err = env_for(t.path(), bin)
        .send("get_server_list", Duration::from_secs(10))
        .await
        .unwrap_err();
    assert!(matches!(err, ControlError::NoDaemon { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("Cannot find MPS control daemon process"),
        "{err}"
    );
}

#[tokio::test]
async fn a_client_that_does_not_answer_is_killed_at_the_timeout() {
    let t = tempfile::tempdir().unwrap();
    let pidfile = t.path().join("client.pid");
    let bin = script(
        t.path(),
        &format!("echo $$ > {}; exec sleep 60", pidfile.display()),
    );
    let err = env_for(t.path(), bin)
        .send("get_server_list", Duration::from_millis(300))
        .await
        .unwrap_err();
    assert!(matches!(err, ControlError::Timeout { .. }), "{err:?}");
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // kill_on_drop sends SIGKILL at once; tokio reaps it in the background.
    let mut gone = false;
    for _ in 0..500 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if stat.is_empty()
            || stat
                .rsplit_once(')')
                .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
        {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(gone, "the timed-out client {pid} must be killed");
}

#[tokio::test]
async fn a_missing_binary_is_named() {
    let t = tempfile::tempdir().unwrap();
    let err = env_for(t.path(), t.path().join("nope"))
        .send("x", Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("nope") && err.to_string().contains("driverRoot"),
        "{err}"
    );
}

#[tokio::test]
async fn a_huge_reply_is_refused_within_a_bound_and_not_echoed() {
    // 8 MiB of reply: read up to the bound only, refused, and the error does not carry it.
    let t = tempfile::tempdir().unwrap();
    let bin = script(t.path(), "read cmd; head -c 8388608 /dev/zero | tr '\\0' x");
    let err = env_for(t.path(), bin)
        .send("get_server_list", Duration::from_secs(20))
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("reply larger than"), "{msg}");
    assert!(
        msg.len() < 500,
        "error echoes the reply: {} bytes",
        msg.len()
    );
}

#[tokio::test]
async fn a_failing_command_echoes_a_clipped_output() {
    let t = tempfile::tempdir().unwrap();
    let bin = script(
        t.path(),
        "read cmd; head -c 20000 /dev/zero | tr '\\0' y >&2; exit 3",
    );
    let err = env_for(t.path(), bin)
        .send("get_server_list", Duration::from_secs(20))
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, ControlError::Failed { .. }), "{msg}");
    assert!(msg.contains("bytes in all)"), "{msg}");
    assert!(msg.len() < 500, "{} bytes", msg.len());
}
