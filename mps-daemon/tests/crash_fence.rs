//! Between a control daemon's crash and its replacement's limits, CUDA processes on the GPU are
//! refused, never run unlimited (issue #22): gpu-mps-daemon sets compute mode PROHIBITED when the
//! crash is noticed and EXCLUSIVE_PROCESS back just before `ready`.
//!
//! The node is a full simulated one (`gpuhook-sim build l20-minimal`): GPU facts by discovery,
//! compute modes through its mock NVML, which the simulated CUDA client reads like the CUDA
//! driver (NVIDIA: a client that finds no control daemon "continues to run as it normally would
//! without MPS", `nvidia-cuda-mps-control(1)`; PROHIBITED: "No contexts can be created on this
//! device", CUDA Driver API `CUcomputemode`). The restart is held open deterministically: the
//! replacement control daemon waits before binding its socket while a gate file exists
//! (`GPUHOOK_SIM_MPS_HOLD`), and says so with `<gate>.waiting`.
//!
//! Needs root and the workspace's `gpuhook-sim` and mock NVML builds; skipped with a message
//! otherwise, unless GPUHOOK_REQUIRE_E2E=1 makes that a failure.
// Integration tests: a failed unwrap is the test failure, with its location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::sim_node::*;
use common::*;

#[test]
fn a_client_during_a_control_daemon_restart_is_refused_never_unlimited() {
    let Some(tool) = ready_to_run() else { return };
    let sim = Sim::build(&tool, "");
    let mut d = sim.start();
    let (uuid, old) = sim.ready_gpu();
    assert_eq!(
        sim.compute_mode(&uuid),
        "3",
        "EXCLUSIVE_PROCESS while ready"
    );
    let ok = sim.client(&uuid);
    assert!(
        ok.status.success()
            && String::from_utf8_lossy(&ok.stdout).contains("active_thread_percentage=50.0"),
        "{}",
        text(&ok)
    );

    // Hold the replacement's start, then crash the control daemon.
    sim.crash_held_at(
        &sim.gate,
        old,
        "the replacement control daemon held at its start",
    );
    // No daemon listens and the GPU is not ready: a CUDA process would run without MPS...
    assert!(!sim.mps.join(&uuid).join("ready").exists());
    wait_for("status.json: not ready", || {
        (sim.gpu().unwrap()["state"] != "ready").then_some(())
    });
    // ...but the GPU allows no context: it is refused (before the fence: exit 4, unlimited).
    let refused = sim.client(&uuid);
    assert_eq!(refused.status.code(), Some(6), "{}", text(&refused));
    assert!(refused.stdout.is_empty(), "{}", text(&refused));
    assert_eq!(
        sim.compute_mode(&uuid),
        "2",
        "PROHIBITED; log:\n{}",
        d.log_text()
    );
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("PROHIBITED"),
        "{}",
        text(&refused)
    );

    // Released: ready again with the limits, EXCLUSIVE_PROCESS again.
    std::fs::remove_file(&sim.gate).unwrap();
    let g = sim.ready(old);
    assert!(g["restarts"].as_u64().unwrap() >= 1, "{g}");
    assert_eq!(sim.compute_mode(&uuid), "3");
    let ok = sim.client(&uuid);
    assert!(
        ok.status.success()
            && String::from_utf8_lossy(&ok.stdout).contains("active_thread_percentage=50.0"),
        "{}",
        text(&ok)
    );

    d.signal(libc::SIGTERM);
    assert_eq!(d.wait_exit(), Some(0), "{}", d.log_text());
    assert_eq!(sim.compute_mode(&uuid), "0", "the admin's DEFAULT restored");
}

#[test]
fn a_stop_while_restarts_fail_restores_the_admin_mode_not_prohibited() {
    let Some(tool) = ready_to_run() else { return };
    let sim = Sim::build(&tool, "");
    let mut d = sim.start();
    let (uuid, old) = sim.ready_gpu();
    sim.crash_held_at(
        &sim.gate,
        old,
        "the replacement control daemon held at its start",
    );
    assert_eq!(sim.compute_mode(&uuid), "2", "PROHIBITED while restarting");
    // Stopped in the middle of the restart (the gate is never opened).
    d.signal(libc::SIGTERM);
    assert_eq!(d.wait_exit(), Some(0), "{}", d.log_text());
    // Nothing may stay held behind us (the held daemon was killed with its start).
    std::fs::remove_file(&sim.gate).unwrap();
    assert_eq!(
        sim.compute_mode(&uuid),
        "0",
        "PROHIBITED left behind; log:\n{}",
        d.log_text()
    );
}

#[test]
fn a_client_before_the_limits_are_read_back_is_refused_by_its_mps_server() {
    let Some(tool) = ready_to_run() else { return };
    // A driver that ignores the limits in the daemon's environment: until the limit commands
    // are done, a server it starts would serve clients unlimited.
    let sim = Sim::build(&tool, "export GPUHOOK_SIM_MPS_FAULT=ignore-env-limits");
    let mut d = sim.start();
    let (uuid, old) = sim.ready_gpu();
    sim.crash_held_at(
        &sim.commands_gate,
        old,
        "a limit command of the replacement held",
    );
    // The replacement listens (its pid is recorded once it does), its limits are not set.
    wait_for("the replacement's pid in status.json", || {
        sim.gpu()
            .filter(|g| g["pid"].as_i64().is_some_and(|p| p != old))
            .map(|_| ())
    });
    assert!(!sim.mps.join(&uuid).join("ready").exists());
    // The client reaches the daemon, whose MPS server cannot create its context: refused
    // (before the fence: attached with active_thread_percentage=100.0).
    let refused = sim.client(&uuid);
    assert_eq!(refused.status.code(), Some(5), "{}", text(&refused));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("PROHIBITED"),
        "{}",
        text(&refused)
    );
    std::fs::remove_file(&sim.commands_gate).unwrap();
    sim.ready(old);
    assert_eq!(sim.compute_mode(&uuid), "3");
    let ok = sim.client(&uuid);
    assert!(
        ok.status.success()
            && String::from_utf8_lossy(&ok.stdout).contains("active_thread_percentage=50.0"),
        "{}",
        text(&ok)
    );
    d.signal(libc::SIGTERM);
    assert_eq!(d.wait_exit(), Some(0), "{}", d.log_text());
    assert_eq!(sim.compute_mode(&uuid), "0");
}

#[test]
fn an_nvml_error_setting_prohibited_is_reported_and_the_restart_goes_on() {
    let Some(tool) = ready_to_run() else { return };
    let sim = Sim::build(&tool, "");
    let uuid = only_uuid(&sim);
    // The mock NVML keeps the mode in this file: a directory there makes every get/set of the
    // GPU's compute mode fail with NVML_ERROR_UNKNOWN.
    let state = sim.root.join(LIB).join("gpuhook-sim-state");
    std::fs::create_dir_all(state.join(format!("compute-mode-{uuid}"))).unwrap();
    let d = sim.start();
    let g = sim.ready(0);
    assert!(
        g["lastError"]
            .as_str()
            .is_some_and(|e| e.contains("PROHIBITED")),
        "{g}"
    );
    let old = g["pid"].as_i64().unwrap();
    // SAFETY: SIGKILL to the simulated control daemon the test's daemon started.
    unsafe { libc::kill(i32::try_from(old).unwrap(), libc::SIGKILL) };
    let g = sim.ready(old);
    let err = g["lastError"].as_str().unwrap_or_default();
    assert!(
        err.contains(&format!("pid {old}")) && err.contains("PROHIBITED"),
        "{g}"
    );
    let log = d.log_text();
    assert!(
        log.contains("cannot set the compute mode") && log.contains(&uuid),
        "{log}"
    );
}

#[test]
fn a_reload_that_restarts_the_gpu_keeps_it_fenced_and_the_admin_mode() {
    let Some(tool) = ready_to_run() else { return };
    let sim = Sim::build(&tool, "");
    let uuid = only_uuid(&sim);
    // The admin runs this GPU in EXCLUSIVE_PROCESS.
    let state = sim.root.join(LIB).join("gpuhook-sim-state");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(state.join(format!("compute-mode-{uuid}")), "3\n").unwrap();
    let mut d = sim.start();
    let old = sim.ready(0)["pid"].as_i64().unwrap();
    // New settings for the GPU: its supervisor is replaced; the new daemon's start is held.
    let cfg = sim.dir.path().join("config.yaml");
    let before = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, before.replace("replicas: 2", "replicas: 4")).unwrap();
    std::fs::write(&sim.gate, "").unwrap();
    d.signal(libc::SIGHUP);
    wait_for(
        "the new supervisor's control daemon held at its start",
        || waiting(&sim.gate).exists().then_some(()),
    );
    let refused = sim.client(&uuid);
    assert_eq!(refused.status.code(), Some(6), "{}", text(&refused));
    assert_eq!(sim.compute_mode(&uuid), "2");
    std::fs::remove_file(&sim.gate).unwrap();
    sim.ready(old);
    let ok = sim.client(&uuid);
    assert!(
        String::from_utf8_lossy(&ok.stdout).contains("active_thread_percentage=25.0"),
        "{}",
        text(&ok)
    );
    d.signal(libc::SIGTERM);
    assert_eq!(d.wait_exit(), Some(0), "{}", d.log_text());
    assert_eq!(
        sim.compute_mode(&uuid),
        "3",
        "the admin's EXCLUSIVE_PROCESS, handed over through the reload; log:\n{}",
        d.log_text()
    );
}
