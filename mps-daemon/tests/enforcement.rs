//! gpu-mps-daemon's CDI spec against the simulator: it lists the ready GPUs and their shares,
//! bad shares and claims fail before it is written, and a foreign file at its path is left alone.
//! Clients per container: `enforcement_clients.rs`.
// Test support: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

mod enforcement_support;

use std::collections::BTreeMap;
use std::process::Command;

use common::*;
use enforcement_support::*;
use gpu_mps_daemon::gpuhook_cdi::{apply_devices, Registry, Spec};

#[test]
fn spec_lists_ready_gpus_and_is_removed_at_sigterm() {
    let node = Node::new(2, 46068);
    node.write_config(
        "      - {name: nvidia.com/gpu, replicas: 4, devices: all}\n",
        &format!("{FAST}{SHARES}"),
    );
    let mut d = node.start();
    node.wait_ready(0);
    node.wait_ready(1);
    let spec = wait_for("spec with both GPUs", || {
        let s = Spec::from_slice(&std::fs::read(node.cdi_spec()).ok()?, None).ok()?;
        (s.devices.len() == 12).then_some(s)
    });
    assert_eq!(
        (spec.kind.as_str(), spec.cdi_version.as_str()),
        ("nvidia.com/gpu-mps", "0.5.0")
    );
    let env: BTreeMap<String, String> = device_env(&node, "0-half").into_iter().collect();
    assert_eq!(env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], "50");
    assert_eq!(env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], "0=23034M");
    assert_eq!(env["CUDA_MPS_PIPE_DIRECTORY"], "/tmp/nvidia-mps");
    let env: BTreeMap<String, String> = device_env(&node, &uuid(1)).into_iter().collect();
    assert_eq!(env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], "25");
    // The server allows the largest share; a half-share client gets half, a default one a quarter.
    let half = Command::new(sim_bin())
        .env_clear()
        .envs(host_env(&node, "0-half", 0))
        .args(["--sim-client", "--uid", "0", "--hold", "0"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&half.stdout);
    assert!(
        text.contains("active_thread_percentage=50.0 pinned_mem_limit=0=23034M"),
        "{text}"
    );
    // status.json follows the in-memory state shortly after.
    wait_for("status lists 12 CDI devices", || {
        node.status()
            .filter(|s| s["cdi"]["devices"].as_array().map(Vec::len) == Some(12))
    });
    // A reload that drops the half share rewrites the spec without it.
    node.write_config(
        "      - {name: nvidia.com/gpu, replicas: 4, devices: all}\n",
        &format!("{FAST}  shares: [{{name: quarter, fraction: 1/4}}]\n"),
    );
    d.signal(libc::SIGHUP);
    let spec = wait_for("spec without the half share", || {
        let s = Spec::from_slice(&std::fs::read(node.cdi_spec()).ok()?, None).ok()?;
        (s.devices.len() == 8).then_some(s)
    });
    assert!(spec.devices.iter().all(|d| !d.name.ends_with("-half")));
    let env: BTreeMap<String, String> = device_env(&node, "1-quarter").into_iter().collect();
    assert_eq!(env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], "25");
    d.signal(libc::SIGTERM);
    assert_eq!(d.wait_exit(), Some(0), "{}", d.log_text());
    assert!(!node.cdi_spec().exists(), "spec removed at shutdown");
}

#[test]
fn bad_shares_and_claims_fail_before_any_spec_is_written() {
    let node = Node::new(2, 46068);
    let cases = [
        ("      - {name: r, replicas: 2, devices: all}\n", "  shares: [{name: big, fraction: 5/4}]\n", "mpsDaemon.shares[0].fraction: 5/4 is more than a whole GPU"),
        ("      - {name: r, replicas: 2, devices: all}\n", "  shares: [{name: a, fraction: 3/4}, {name: b, fraction: 1/2}]\n", "add up to more than one GPU"),
        ("      - {name: a, replicas: 2, devices: [0]}\n      - {name: b, replicas: 2, devices: [0]}\n", "", "is already shared by resource \"a\""),
        ("      - {name: r, replicas: 2, devices: all}\n", "  shares: [{name: \"x/y\", fraction: 1/4}]\n", "cannot be part of a CDI device name"),
    ];
    for (res, extra, want) in cases {
        node.write_config(res, extra);
        let out = node.command().output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains(want), "want {want:?} in {err}");
        assert!(!node.cdi_dir.exists(), "nothing written for {want}");
        assert!(!node.mps_root.exists());
    }
    // A reload with a bad share keeps the running spec byte for byte.
    node.write_config(
        "      - {name: r, replicas: 2, devices: all}\n",
        &format!("{FAST}{SHARES}"),
    );
    let d = node.start();
    let before = wait_for("spec", || {
        let b = std::fs::read(node.cdi_spec()).ok()?;
        (Spec::from_slice(&b, None).ok()?.devices.len() == 12).then_some(b)
    });
    node.write_config(
        "      - {name: r, replicas: 2, devices: all}\n",
        &format!("{FAST}  shares: [{{name: huge, fraction: 2}}]\n"),
    );
    d.signal(libc::SIGHUP);
    let s = wait_for("reload refused", || {
        node.status().filter(|s| !s["lastReloadError"].is_null())
    });
    assert!(
        s["lastReloadError"]
            .as_str()
            .unwrap()
            .contains("mpsDaemon.shares[0].fraction"),
        "{s}"
    );
    assert_eq!(std::fs::read(node.cdi_spec()).unwrap(), before);
    // Asking for a share that does not exist is the consumer's error; nothing is applied.
    let reg = Registry::load(&[&node.cdi_dir]);
    let mut oci = serde_json::json!({"process": {"env": ["A=1"]}});
    let err = apply_devices(
        &mut oci,
        &reg,
        &[
            "nvidia.com/gpu-mps=0-eighth".into(),
            "nvidia.com/gpu-mps=0-half".into(),
        ],
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "unresolvable CDI devices nvidia.com/gpu-mps=0-eighth"
    );
    assert_eq!(oci, serde_json::json!({"process": {"env": ["A=1"]}}));
}

#[test]
fn a_foreign_file_at_the_spec_path_is_left_alone() {
    let node = Node::new(1, 8192);
    std::fs::create_dir_all(&node.cdi_dir).unwrap();
    let foreign = r#"{"cdiVersion":"0.3.0","kind":"acme.com/gpu-mps","devices":[{"name":"a","containerEdits":{"env":["A=1"]}}]}"#;
    std::fs::write(node.cdi_spec(), foreign).unwrap();
    node.write_config("      - {name: r, replicas: 2, devices: all}\n", FAST);
    let mut d = node.start();
    node.wait_ready(0);
    let s = wait_for("cdi error", || {
        node.status().filter(|s| !s["cdi"]["lastError"].is_null())
    });
    assert!(
        s["cdi"]["lastError"]
            .as_str()
            .unwrap()
            .contains("refusing to overwrite"),
        "{s}"
    );
    d.signal(libc::SIGTERM);
    assert_eq!(d.wait_exit(), Some(0));
    assert_eq!(std::fs::read_to_string(node.cdi_spec()).unwrap(), foreign);
}
